"""How much a selection rule could gain: the candidates of each question of eval runs, scored against gold.

    python -m reflect_sql.experiments.pool_report RUN_DIR [RUN_DIR ...]

For each question, the candidates are the pool the selection step lists in the trace (setting
``selection`` other than ``paper``); a run without that step offers every SQL its trace wrote
(generations, samples, repairs). Each candidate is scored by the harness's own rule (``match``), so
"oracle" is the EX a perfect chooser would reach over the same candidates: the headroom of
selection. Prints a markdown table: EX of the answers given, oracle EX, candidates and distinct
results per question, and the questions a right candidate was in the pool of but not chosen.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from reflect_sql.errors import UserError
from reflect_sql.experiments.datasets import questions_of_run
from reflect_sql.experiments.metrics import match
from reflect_sql.experiments.results_log import read_run, report_command
from reflect_sql.settings import Settings


def candidates(steps: list[dict[str, Any]]) -> tuple[list[str], list[str | None] | None]:
    """(candidate SQL, their result digests or None when the trace has no pool listing)."""
    for step in reversed(steps):
        pool = (step.get("inputs") or {}).get("pool") if step.get("loop") == "selection" else None
        if pool is not None:
            return [c["sql"] for c in pool], [c.get("result") for c in pool]
    written = []
    for step in steps:
        sql = (step.get("rewrite") or {}).get("sql")
        if sql and sql not in written:
            written.append(sql)
    return written, None


def study(run: Path) -> dict[str, Any]:
    meta, records = read_run(run)
    questions, fmt = questions_of_run(meta)
    value_cap = meta.get("settings", {}).get("max_value_bytes", Settings().max_value_bytes)  # the run's engine cap
    rows = []
    for record in records:
        key = str(record["question_id"])
        question = questions.get(key)
        trace_file = run / "traces" / f"{key}.json"
        if question is None or not trace_file.is_file():
            raise UserError(f"{run}: question {key} has {'no trace file' if question is not None else 'no entry in the dataset'}; "
                            "the report would count fewer questions than the run")
        sqls, digests = candidates(json.loads(trace_file.read_text(encoding="utf-8")))
        right = [match(fmt, sql, question.gold_sql, question.db_path, max_value_bytes=value_cap).correct for sql in sqls]
        rows.append({"key": key, "correct": bool(record.get("correct")), "oracle": any(right) or bool(record.get("correct")),
                     "candidates": len(sqls), "right_candidates": sum(right),
                     "distinct_results": len({d for d in digests if d is not None}) if digests is not None else None})
    return {"run": run.name, "rows": rows}


def report(runs: list[Path]) -> str:
    lines = ["| run | n | EX | oracle EX over the candidates | candidates/q | distinct results/q | right in the pool, not chosen |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for run in runs:
        found = study(run)
        rows = found["rows"]
        if not rows:
            lines.append(f"| {found['run']} | 0 | – | – | – | – | – |")
            continue
        n = len(rows)
        ex, oracle = sum(r["correct"] for r in rows), sum(r["oracle"] for r in rows)
        distinct = [r["distinct_results"] for r in rows if r["distinct_results"] is not None]
        missed = [r["key"] for r in rows if r["oracle"] and not r["correct"]]
        lines.append(f"| {found['run']} | {n} | {100 * ex / n:.1f}% ({ex}) | {100 * oracle / n:.1f}% ({oracle}) | "
                     f"{sum(r['candidates'] for r in rows) / n:.2f} | "
                     f"{f'{sum(distinct) / len(distinct):.2f}' if distinct else '– (no pool listed)'} | "
                     f"{', '.join(missed) or 'none'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return report_command("pool_report", __doc__, report, argv)


if __name__ == "__main__":
    sys.exit(main())
