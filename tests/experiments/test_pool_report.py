"""pool_report: the candidates of each question, scored against gold on the shared BIRD dev data."""
from __future__ import annotations

import json
from pathlib import Path

from reflect_sql.experiments.datasets import load_dataset
from reflect_sql.experiments.pool_report import main, study


def _run(tmp: Path, root: Path, traces: dict[str, list], correct: dict[str, bool]) -> Path:
    run = tmp / "run"
    (run / "traces").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"dataset": {"format": "bird", "root": str(root), "split": "dev",
                                                          "sample": 3, "seed": 0}}))
    (run / "results.jsonl").write_text("".join(json.dumps({"question_id": k, "correct": v}) + "\n"
                                               for k, v in correct.items()))
    for key, steps in traces.items():
        (run / "traces" / f"{key}.json").write_text(json.dumps(steps))
    return run


def test_oracle_counts_a_right_candidate_the_rule_did_not_choose(benchmarks_dir, tmp_path, capsys):
    root = benchmarks_dir / "bird"
    first, second, third = load_dataset("bird", root, sample=3, seed=0)
    wrong = "SELECT 1 WHERE 0"
    traces = {
        # The pool held the gold query, the rule chose the wrong one: headroom.
        first.key: [{"loop": "selection", "inputs": {"sql": wrong, "pool": [
            {"sql": wrong, "result": "a"}, {"sql": first.gold_sql, "result": "b"}, {"sql": wrong + " ", "result": "a"}]}}],
        # No pool listing: every SQL the trace wrote is a candidate (a failing one included).
        second.key: [{"loop": "synthesis.generate", "rewrite": {"sql": "SELECT nope FROM nowhere"}},
                     {"loop": "synthesis.repair", "rewrite": {"sql": wrong}}],
        third.key: [{"loop": "synthesis.generate", "rewrite": {"sql": third.gold_sql}}],
    }
    run = _run(tmp_path, root, traces, {first.key: False, second.key: False, third.key: True})
    rows = {r["key"]: r for r in study(run)["rows"]}
    assert rows[first.key] == {"key": first.key, "correct": False, "oracle": True, "candidates": 3,
                               "right_candidates": 1, "distinct_results": 2}
    assert rows[second.key]["oracle"] is False and rows[second.key]["candidates"] == 2
    assert rows[second.key]["distinct_results"] is None
    assert rows[third.key]["oracle"] is True and rows[third.key]["right_candidates"] == 1
    assert main([str(run)]) == 0
    table = capsys.readouterr().out
    assert f"| run | 3 | 33.3% (1) | 66.7% (2) | 2.00 | 2.00 | {first.key} |" in table


def test_a_directory_that_is_not_a_run_is_a_one_line_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("pool_report: error: ") and "not an eval output directory" in err and "\n" not in err


def test_a_question_without_its_trace_is_an_error_not_a_smaller_count(benchmarks_dir, tmp_path, capsys):
    root = benchmarks_dir / "bird"
    first, second, _ = load_dataset("bird", root, sample=3, seed=0)
    run = _run(tmp_path, root, {first.key: []}, {first.key: True, second.key: False})
    assert main([str(run)]) == 2
    assert f"question {second.key} has no trace file" in capsys.readouterr().err
