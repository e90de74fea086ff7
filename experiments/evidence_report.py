"""How often the evidence check (``programs/evidence_columns.py``) fires: on gold SQL, where every
alarm is false, and on the answers of eval runs, right and wrong apart.

    python -m reflect_sql.experiments.evidence_report --gold bird:../shared/benchmarks/bird [RUN_DIR ...]

``--gold FORMAT:ROOT`` (repeatable) checks every question of ``ROOT/dev.json`` that has evidence on
its own gold SQL. Each RUN_DIR (an eval output directory) checks the final SQL of each answered
question against that question's evidence. Prints a markdown table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Iterable

from reflect_sql.db import open_engine
from reflect_sql.db.schema import Schema
from reflect_sql.errors import UserError
from reflect_sql.experiments.datasets import Question, load_dataset, questions_of_run
from reflect_sql.experiments.results_log import read_run
from reflect_sql.programs.evidence_columns import evidence_clauses, unused_clauses


class _Schemas:
    def __init__(self) -> None:
        self._by_path: dict[Path, Schema] = {}

    def of(self, question: Question) -> Schema:
        if question.db_path not in self._by_path:
            with open_engine(str(question.db_path)) as engine:
                self._by_path[question.db_path] = engine.introspect()
        return self._by_path[question.db_path]


def _row(label: str, checked: Iterable[tuple[Question, str]], schemas: _Schemas) -> dict[str, Any]:
    questions = clauses = alarms = flagged = 0
    examples = []
    for question, sql in checked:
        schema = schemas.of(question)
        mapped = evidence_clauses(question.evidence, schema)
        if not mapped:
            continue
        questions += 1
        clauses += len(mapped)
        unused = unused_clauses(sql, question.evidence, schema, "sqlite")  # BIRD-format databases
        alarms += len(unused)
        flagged += bool(unused)
        examples += [f"{question.key}: {u.render()}" for u in unused]
    return {"label": label, "questions": questions, "clauses": clauses, "alarms": alarms, "flagged": flagged,
            "examples": examples}


def gold_row(spec: str, schemas: _Schemas) -> dict[str, Any]:
    fmt, sep, root = spec.partition(":")
    if not sep:
        raise UserError(f"--gold takes FORMAT:ROOT (bird:../shared/benchmarks/bird), got {spec!r}")
    questions = load_dataset(fmt, root)
    return _row(f"gold, {fmt} {root}", ((q, q.gold_sql) for q in questions), schemas)


def run_rows(run: Path, schemas: _Schemas) -> list[dict[str, Any]]:
    meta, records = read_run(run)
    questions, _ = questions_of_run(meta)
    answered = [(questions[str(r["question_id"])], r) for r in records if r.get("sql") and str(r["question_id"]) in questions]
    return [_row(f"{run.name}, {verdict} answers", ((q, r["sql"]) for q, r in answered if bool(r.get("correct")) == right), schemas)
            for verdict, right in (("right", True), ("wrong", False))]


def report(rows: list[dict[str, Any]]) -> str:
    lines = ["| SQL checked | questions with mapped evidence | clauses | clauses unused (alarms) | questions flagged |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        share = f" ({100 * r['flagged'] / r['questions']:.1f}%)" if r["questions"] else ""
        lines.append(f"| {r['label']} | {r['questions']} | {r['clauses']} | {r['alarms']} | {r['flagged']}{share} |")
    for r in rows:
        if r["examples"]:
            lines += ["", f"Alarms, {r['label']}:"] + [f"- {e}" for e in r["examples"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="eval output directories")
    parser.add_argument("--gold", action="append", default=[], metavar="FORMAT:ROOT", help="check a dataset's gold SQL")
    args = parser.parse_args(argv)
    if not args.runs and not args.gold:
        parser.error("give --gold FORMAT:ROOT or at least one eval output directory")
    schemas = _Schemas()
    try:
        rows = [gold_row(spec, schemas) for spec in args.gold]
        for run in args.runs:
            rows += run_rows(run, schemas)
    except UserError as exc:
        print(f"evidence_report: error: {exc}", file=sys.stderr)
        return 2
    print(report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
