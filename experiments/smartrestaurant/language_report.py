"""EX by language of eval runs over the restaurant's twin questions (issue 22).

    python -m reflect_sql.experiments.smartrestaurant.language_report RUN_DIR [RUN_DIR ...]

For each run: per language, the questions answered, EX overall and by difficulty, and LM calls,
prompt tokens and seconds per question; then, over the twin pairs both runs hold, how often the
English and the Vietnamese question of a pair were both right, only one, or neither. Prints a
markdown table.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from reflect_sql.experiments.results_log import read_records, report_command
from reflect_sql.experiments.smartrestaurant import QUESTIONS
from reflect_sql.experiments.smartrestaurant.bird_layout import twin_pairs

DIFFICULTIES = ("simple", "moderate", "challenging")


def _results(run: Path) -> dict[str, dict]:
    return {str(row["question_id"]): row for row in read_records(run)}


def _share(rows: list[dict]) -> str:
    return f"{100 * sum(bool(r['correct']) for r in rows) / len(rows):.1f} ({sum(bool(r['correct']) for r in rows)}/{len(rows)})" if rows else "-"


def report(runs: list[Path]) -> str:
    entries = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    language = {str(e["question_id"]): e["lang"] for e in entries}
    pairs = [(str(en["question_id"]), str(vi["question_id"])) for en, vi in twin_pairs(entries)]
    lines = ["| run | language | n | EX % | " + " | ".join(f"{d} EX %" for d in DIFFICULTIES)
             + " | LM calls/q | prompt tokens/q | s/q |",
             "|---|---|---:|---:|" + "---:|" * len(DIFFICULTIES) + "---:|---:|---:|"]
    agreement = []
    for run in runs:
        results = _results(run)
        for lang in ("en", "vi"):
            rows = [r for key, r in results.items() if language.get(key) == lang]
            if not rows:
                continue
            per = [_share([r for r in rows if r.get("difficulty") == d]) for d in DIFFICULTIES]
            cost = [r.get("cost") or {} for r in rows]
            lines.append(f"| {run.name} | {lang} | {len(rows)} | {_share(rows)} | " + " | ".join(per)
                         + f" | {sum(c.get('lm_calls', 0) for c in cost) / len(rows):.2f}"
                         + f" | {sum(c.get('prompt_tokens', 0) for c in cost) / len(rows):.0f}"
                         + f" | {sum(c.get('seconds', 0) for c in cost) / len(rows):.1f} |")
        both = [(results[en], results[vi]) for en, vi in pairs if en in results and vi in results]
        if both:
            counts = {"both": 0, "en only": 0, "vi only": 0, "neither": 0}
            for en, vi in both:
                key = ("both" if vi["correct"] else "en only") if en["correct"] else ("vi only" if vi["correct"] else "neither")
                counts[key] += 1
            agreement.append(f"- {run.name}: {len(both)} twin pairs: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return "\n".join(lines + ([""] + agreement if agreement else []))


def main(argv: list[str] | None = None) -> int:
    return report_command("language_report", __doc__, report, argv)


if __name__ == "__main__":
    sys.exit(main())
