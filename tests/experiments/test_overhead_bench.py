"""bench/overhead.py runs the real pipeline with the oracle LM and accounts for its time."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_overhead_bench_json(benchmarks_dir, tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"cost": {"per_question": {"lm_seconds": 60.0}}}))
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "overhead.py"), "--json", "--limit", "4", "--no-kb",
         "--root", str(benchmarks_dir), "--against", str(summary)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["questions"] == 4 and result["ex_overall"] == 100.0  # the oracle answers with gold SQL
    # Generation and two judges at least; a whole-schema context (--no-kb) is not retrieval-judged.
    assert result["lm_calls_per_question"] >= 3 and result["sql_calls_per_question"] >= 1
    assert sum(result["share"].values()) == pytest.approx(1.0, abs=0.01)
    assert 0 < result["seconds_per_question"] < 60
    assert 0 < result["overhead_share_with_embedded_lm"] < 0.5
