"""bench/pipeline_speed.py runs four variants on the same questions and compares them per layout."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_pipeline_speed_bench_json_and_resume(benchmarks_dir, tmp_path):
    command = [sys.executable, str(REPO / "bench" / "pipeline_speed.py"), "--oracle", "--json", "--questions", "2",
               "--root", str(benchmarks_dir), "--out", str(tmp_path / "runs")]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result["variants"]) == {"single-dspy", "single-shared_head", "full-dspy", "full-shared_head"}
    keys = {tuple(r["key"] for r in v["per_question"]) for v in result["variants"].values()}
    assert len(keys) == 1 and len(next(iter(keys))) == 2  # the same two questions everywhere
    for name, v in result["variants"].items():
        assert v["totals"]["ex"] == 100.0  # the oracle answers with the gold SQL
        for row in v["per_question"]:
            assert row["prompt_computed"] > 0 and row["prompt_reused"] == 0  # a scripted engine reuses nothing
            assert row["lm_calls"] == (1 if name.startswith("single") else row["lm_calls"]) and row["lm_calls"] >= 1
    assert result["variants"]["full-dspy"]["totals"]["lm_calls_per_question"] >= 4
    for layout in ("dspy", "shared_head"):
        assert result["layouts"][layout]["full_over_single_seconds"] > 0
        assert result["layouts"][layout]["ex_full_minus_single"] == 0.0
    # Rerunning resumes every variant: nothing is answered twice.
    again = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    for name in result["variants"]:
        lines = (tmp_path / "runs" / name / "results.jsonl").read_text().splitlines()
        assert len(lines) == 2


@pytest.mark.slow
def test_pipeline_speed_bench_one_layout_with_the_json_adapter(benchmarks_dir, tmp_path):
    command = [sys.executable, str(REPO / "bench" / "pipeline_speed.py"), "--oracle", "--json", "--questions", "2",
               "--root", str(benchmarks_dir), "--out", str(tmp_path / "runs"), "--layouts", "dspy",
               "--set", "adapter=json"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert set(result["variants"]) == {"single-dspy", "full-dspy"} and set(result["layouts"]) == {"dspy"}
    assert result["variants"]["full-dspy"]["totals"]["ex"] == 100.0
    assert not (tmp_path / "runs" / "full-shared_head").exists()
    run = json.loads((tmp_path / "runs" / "full-dspy" / "run.json").read_text())
    assert '"adapter": "json"' in json.dumps(run, sort_keys=True)
    # Each variant starts from its own empty response cache: what a first run pays, nothing shared.
    settings = json.loads((tmp_path / "runs" / "full-dspy.yaml").read_text())["settings"]
    assert settings["lm_cache"] is True and settings["cache_dir"] == str(tmp_path / "runs" / "dspy-cache" / "full-dspy")
    assert all("cache_hits" in row for v in result["variants"].values() for row in v["per_question"])
