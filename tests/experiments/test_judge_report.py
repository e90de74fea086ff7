"""judge_report: every SQL the judges scored in eval runs, matched against gold on the shared BIRD dev data."""
from __future__ import annotations

import json
from pathlib import Path

from reflect_sql.experiments.datasets import load_dataset
from reflect_sql.experiments.judge_report import cases, main

WRONG = "SELECT 1 WHERE 0"


def _run(tmp: Path, name: str, root: Path, traces: dict[str, list], answered: list[str], **settings) -> Path:
    run = tmp / name
    (run / "traces").mkdir(parents=True)
    # limit 1: the first invocation's, as `ablate --step` leaves it while later rounds answer more questions.
    (run / "run.json").write_text(json.dumps({"dataset": {"format": "bird", "root": str(root), "split": "dev",
                                                          "sample": 3, "seed": 0, "limit": 1},
                                              "settings": settings}))
    (run / "results.jsonl").write_text("".join(json.dumps({"question_id": k, "correct": False}) + "\n" for k in answered))
    for key, steps in traces.items():
        (run / "traces" / f"{key}.json").write_text(json.dumps(steps))
    return run


def _semantic(sql: str, s: float) -> dict:
    return {"loop": "synthesis.semantic", "inputs": {"sql": sql}, "scores": {"C": s, "S": s, "threshold": 5.0}}


def _entailment(sql: str, e: float) -> dict:
    return {"loop": "entailment", "inputs": {"sql": sql}, "scores": {"E": e, "threshold": 3.0}}


def test_every_judged_sql_is_a_case_once_and_is_matched_against_gold(benchmarks_dir, tmp_path, capsys):
    root = benchmarks_dir / "bird"
    first, second, third = load_dataset("bird", root, sample=3, seed=0)
    a = _run(tmp_path, "a", root, {
        # The judge ranked right above wrong in the first question and wrong above right in the second.
        first.key: [_semantic(first.gold_sql, 8.0), _semantic(WRONG, 2.0), _entailment(first.gold_sql, 4.0),
                    {"loop": "synthesis.generate", "rewrite": {"sql": WRONG}}],  # not a judgment
        second.key: [_semantic(second.gold_sql, 3.0), _semantic(WRONG, 6.0), _entailment(WRONG, 2.0)],
    }, [first.key, second.key, third.key])  # the third has no trace file
    # A variant that judged the same SQL again (a shared LM cache), and one more.
    b = _run(tmp_path, "b", root, {first.key: [_semantic(first.gold_sql, 8.0), _semantic(first.gold_sql + " ", 7.0)]},
             [first.key])
    records, thresholds, untraced = cases([a, b])
    semantic = sorted((r["question"], r["scores"]["semantic"], r["correct"]) for r in records if "semantic" in r["scores"])
    assert semantic == sorted([(first.key, 8.0, True), (first.key, 2.0, False), (second.key, 3.0, True),
                               (second.key, 6.0, False), (first.key, 7.0, True)])
    entailment = sorted((r["scores"]["entailment"], r["correct"]) for r in records if "entailment" in r["scores"])
    assert entailment == [(2.0, False), (4.0, True)]
    assert untraced == 1 and thresholds["theta_s"] == 5.0

    assert main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("7 judgments of distinct SQL over 2 questions, from 2 run(s); 1 answered question(s) "
                          "without a trace file left out")
    # S: right 8, 3, 7 against wrong 2, 6: 5 of 6 pairs in order. Accepted at 5: 8, 6 and 7.
    assert "| S (semantic) | 5.0 | 5 | 3 | 0.833 | 3 | 0.667 | 0.667 |" in out
    assert "| E (entailment) | 3.0 | 2 | 1 | 1.000 | 1 | 1.000 | 1.000 |" in out
    assert "retrieval" not in out


def test_runs_judged_at_other_thresholds_are_not_pooled(benchmarks_dir, tmp_path, capsys):
    root = benchmarks_dir / "bird"
    first = load_dataset("bird", root, sample=3, seed=0)[0]
    traces = {first.key: [_semantic(first.gold_sql, 8.0)]}
    a = _run(tmp_path, "a", root, traces, [first.key])
    b = _run(tmp_path, "b", root, traces, [first.key], theta_s=8.334)
    assert main([str(a), str(b)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("judge_report: error: ") and "thresholds" in err and "\n" not in err
