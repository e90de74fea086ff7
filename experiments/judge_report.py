"""How well the SQL judges rank every query they judged in eval runs, not only the answers given.

    python -m reflect_sql.experiments.judge_report RUN_DIR [RUN_DIR ...]

An eval's ``calibration.md`` scores each question's final answer only: one query a question, and
one the loops already let through. Here every semantic judgment (``synthesis.semantic``, S) and
every entailment judgment (``entailment``, E) in the runs' traces is a case: the SQL it judged, its
score, and whether that SQL is right by the harness's own rule (``match``) against gold. Runs of an
ablation share their LM cache, so one query is often judged with the same prompt in several variants:
a (question, judge, SQL) counts once, with the first score seen. A question whose trace file is
gone (runs keep them under ``traces/``; results copied elsewhere may not) is left out and counted
in the header. Prints the calibration table (AUC, and acceptance at the runs' thresholds, which
must agree) over the pooled cases.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from reflect_sql.errors import UserError
from reflect_sql.experiments.calibration import calibrate, markdown
from reflect_sql.experiments.datasets import questions_of_run
from reflect_sql.experiments.metrics import match
from reflect_sql.experiments.results_log import read_run, report_command
from reflect_sql.settings import Settings

# The trace step of each SQL judge, the score it writes there, and the calibration key it reports under.
JUDGE_STEPS = {"synthesis.semantic": ("S", "semantic"), "entailment": ("E", "entailment")}
THRESHOLDS = ("theta_r", "theta_s", "theta_e")


def judged(steps: list[dict[str, Any]]) -> list[tuple[str, str, float]]:
    """(calibration key, SQL, score) of every judgment in one question's trace that gave a score."""
    out = []
    for step in steps:
        if step.get("loop") not in JUDGE_STEPS:
            continue
        symbol, judge = JUDGE_STEPS[step["loop"]]
        sql = (step.get("inputs") or {}).get("sql")
        score = (step.get("scores") or {}).get(symbol)
        if sql and isinstance(score, (int, float)):
            out.append((judge, sql, float(score)))
    return out


def cases(runs: list[Path]) -> tuple[list[dict[str, Any]], dict[str, float], int]:
    """The pooled cases of ``runs`` (records for ``calibrate``), the thresholds they share, and how
    many (run, question) pairs had no trace file."""
    untraced = 0
    seen: set[tuple[str, str, str, str]] = set()
    verdicts: dict[tuple[str, str, str], bool] = {}
    records: list[dict[str, Any]] = []
    defaults = Settings()
    thresholds: dict[str, float] | None = None
    for run in runs:
        meta, results = read_run(run)
        settings = meta.get("settings", {})
        these = {t: float(settings.get(t, getattr(defaults, t))) for t in THRESHOLDS}
        if thresholds not in (None, these):
            raise UserError(f"{run}: its thresholds {these} differ from the other runs' {thresholds}; "
                            "pool runs judged at the same thresholds")
        thresholds = these
        questions, fmt = questions_of_run(meta)
        dataset = json.dumps(meta.get("dataset", {}), sort_keys=True)
        value_cap = settings.get("max_value_bytes", defaults.max_value_bytes)
        for record in results:
            key = str(record["question_id"])
            question = questions.get(key)
            trace_file = run / "traces" / f"{key}.json"
            if question is None:
                raise UserError(f"{run}: question {key} has no entry in the dataset the run names")
            if not trace_file.is_file():
                untraced += 1
                continue
            for judge, sql, score in judged(json.loads(trace_file.read_text(encoding="utf-8"))):
                if (dataset, key, judge, sql) in seen:
                    continue
                seen.add((dataset, key, judge, sql))
                if (dataset, key, sql) not in verdicts:
                    verdicts[dataset, key, sql] = match(fmt, sql, question.gold_sql, question.db_path,
                                                        max_value_bytes=value_cap).correct
                records.append({"scores": {judge: score}, "correct": verdicts[dataset, key, sql], "question": key})
    return records, thresholds or {t: float(getattr(defaults, t)) for t in THRESHOLDS}, untraced


def report(runs: list[Path]) -> str:
    records, thresholds, untraced = cases(runs)
    rows = [row for row in calibrate(records, thresholds) if row["judge"] != "retrieval"]
    questions = len({r["question"] for r in records})
    gone = f"; {untraced} answered question(s) without a trace file left out" if untraced else ""
    return (f"{len(records)} judgments of distinct SQL over {questions} questions, from {len(runs)} run(s){gone}\n\n"
            + markdown(rows))


def main(argv: list[str] | None = None) -> int:
    return report_command("judge_report", __doc__, report, argv)


if __name__ == "__main__":
    sys.exit(main())
