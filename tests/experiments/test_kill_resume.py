"""SIGKILL an evaluation mid-run, rerun it with the same --out: no row lost, none doubled."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import dspy
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.runner import run_eval

    def factory(q):
        def program(question, evidence=""):
            time.sleep(float(sys.argv[3]))  # a slow LM
            return dspy.Prediction(sql=q.gold_sql, rows=[], scores={}, cost={"lm_calls": 1})
        return program

    run_eval(load_config(sys.argv[1]), sys.argv[2], factory, progress=False)
    """
)


@pytest.mark.slow
def test_sigkill_then_resume_loses_and_doubles_nothing(benchmarks_dir, tmp_path, sigkill_after):
    config = tmp_path / "kill.yaml"
    config.write_text(f"dataset: {{format: bird, root: {benchmarks_dir / 'bird'}, sample: 30, seed: 1}}\n"
                      "threads: 3\nmlflow: {enabled: false}\n")
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    results = out / "results.jsonl"
    code, _ = sigkill_after([sys.executable, str(script), str(config), str(out), "0.1"], results, answers=6, timeout_s=60)
    assert code == -signal.SIGKILL, "the run ended before its kill"
    before = results.read_bytes()
    done_before = [json.loads(l)["question_id"] for l in before.decode().splitlines() if l.endswith("}")]
    assert 6 <= len(done_before) < 30, "the kill must land mid-run"

    subprocess.run([sys.executable, str(script), str(config), str(out), "0"], check=True, timeout=120)
    lines = results.read_text().splitlines()
    ids = [json.loads(l)["question_id"] for l in lines]
    assert len(ids) == 30 and len(set(ids)) == 30
    assert ids[: len(done_before)] == done_before  # finished rows kept, in place, not rerun
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"] == 100.0 and summary["counts"]["overall"] == 30
    assert len(json.loads((out / "run.json").read_text())["sessions"]) == 2
