"""A non-editable install must import every room under ``reflect_sql``."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOT_SOURCES = (".git", ".venv", "build", "runs", "demo_data", "*.egg-info", ".pytest_cache", "__pycache__", "kb_store", "mlruns*")
ROOMS = ["signatures", "programs", "kb", "optimize", "experiments", "db", "lm"]


@pytest.mark.slow
def test_installed_copy_imports_every_room(tmp_path):
    # Build from a copy: setuptools writes build/ next to the sources, and a stale build/lib in the
    # checkout would leak deleted modules into later installs.
    source = tmp_path / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*NOT_SOURCES))
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target), str(source)],
        check=True,
        cwd=tmp_path,
    )
    probe = (
        "import importlib, sys\n"
        f"rooms = {ROOMS!r}\n"
        "import reflect_sql\n"
        f"assert reflect_sql.__file__.startswith({str(target)!r}), reflect_sql.__file__\n"
        "for r in rooms:\n"
        "    m = importlib.import_module('reflect_sql.' + r)\n"
        f"    assert m.__file__.startswith({str(target)!r}), m.__file__\n"
        "import reflect_sql.settings, reflect_sql.cli\n"
        "print('ok')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    # Package data travels with the code.
    assert not (target / "db").exists(), "rooms must not install as top-level packages"


def test_editable_install_serves_this_checkout():
    import reflect_sql
    import reflect_sql.db

    assert Path(reflect_sql.db.__file__).resolve().parent == REPO / "db"
