"""bench/retrieval_scale.py: the shared dev databases merged into one schema, distractors added up
to the asked width, and the shared questions asked against it, gold tables read through renames."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench(benchmarks_dir: Path, work_dir: Path, limit: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "bench" / "retrieval_scale.py"), "--json", "--columns", "450", "--limit", str(limit),
         "--bird-root", str(benchmarks_dir / "bird"), "--spider-root", str(benchmarks_dir / "spider"),
         "--work-dir", str(work_dir)],
        capture_output=True, text=True, timeout=900,
    )


@pytest.mark.slow
def test_scale_bench_merges_renames_and_measures(benchmarks_dir, tmp_path):
    proc = _bench(benchmarks_dir, tmp_path, limit=6)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert 450 <= result["columns"] < 470 and result["distractor_tables"] > 0
    assert result["questions"] == 12 and result["per_dataset"]["bird"]["questions"] == 6
    assert 0 < result["table_recall"] <= 1 and 0 < result["column_recall"] <= 1
    assert result["retrieval_ms"]["p50"] > 0 and result["build_fresh"] and result["build_peak_rss_mib"] > 0
    assert result["warm_seconds"] > 0  # the retriever was warmed before timing
    assert result["question_model_frozen"] is True  # by the warm-up, in the default bfloat16
    merged = tmp_path / "450-0" / "merged.sqlite"
    with sqlite3.connect(merged) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        # A name two databases share is kept once; the later database's copy is prefixed.
        assert "singer" in tables and {"concert_singer_singer", "singer_singer"} & tables
        # Rows and foreign keys came along.
        assert conn.execute("SELECT count(*) FROM superhero").fetchone()[0] > 0
        assert conn.execute("SELECT count(*) FROM pragma_foreign_key_list('hero_power')").fetchone()[0] == 2
    conn.close()
    # A second run reuses the merged database and the KB.
    again = _bench(benchmarks_dir, tmp_path, limit=2)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["build_fresh"] is False
