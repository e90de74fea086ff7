"""bench/retrieval_recall.py on the restaurant's bilingual set: figures per language, the twins only,
and questions retrieved with or without their evidence."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bench" / "retrieval_recall.py"), *args],
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_restaurant_twins_recall_per_language(tmp_path):
    bare = _bench("--dataset", "restaurant", "--twins", "--kb-root", str(tmp_path), "--json")
    assert bare.returncode == 0, bare.stderr
    result = json.loads(bare.stdout)
    assert result["questions"] == 52 and not result["with_evidence"] and result["rendered_by"] is None
    en, vi = result["per_language"]["en"], result["per_language"]["vi"]
    assert en["questions"] == vi["questions"] == 26
    assert 0 < vi["column_recall"] <= 1 and 0 < en["column_recall"] <= 1

    hinted = json.loads(_bench("--dataset", "restaurant", "--twins", "--kb-root", str(tmp_path), "--json",
                               "--with-evidence").stdout)
    # The evidence names the columns (opened_at, customers.email) that the questions leave implicit.
    assert hinted["with_evidence"] and hinted["column_recall"] >= result["column_recall"]


def test_twins_are_only_for_the_restaurant(tmp_path):
    proc = _bench("--dataset", "spider", "--root", str(tmp_path), "--twins")
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "--twins" in proc.stderr
