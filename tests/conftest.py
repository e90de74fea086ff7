"""Fixtures shared across rooms: the shared benchmark data and a PostgreSQL server.

PostgreSQL tests (``@pytest.mark.postgres``) read the server URL from ``REFLECT_SQL_TEST_PG_URL``
and skip without it; ``.ci/run`` always sets it.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
BIRD_DBS = ("student_club", "superhero")


@pytest.fixture(scope="session")
def benchmarks_dir() -> Path:
    root = Path(os.environ.get("REFLECT_SQL_BENCHMARKS") or REPO_ROOT / ".." / "shared" / "benchmarks").resolve()
    if not (root / "bird" / "dev.json").is_file():
        pytest.skip(f"shared benchmarks not found at {root} (set REFLECT_SQL_BENCHMARKS)")
    return root


@pytest.fixture(scope="session")
def pg_url() -> str:
    url = os.environ.get("REFLECT_SQL_TEST_PG_URL")
    if not url:
        pytest.skip("REFLECT_SQL_TEST_PG_URL is not set: no PostgreSQL server for this test")
    return url


@pytest.fixture(scope="session")
def bird_pg(pg_url: str, benchmarks_dir: Path):
    """The BIRD dev databases copied into PostgreSQL once per session: ``{db_id: engine URL}``.

    Schema names carry the process id, so parallel test sessions on one server never drop each
    other's data; they are dropped at the end.
    """
    import psycopg
    from psycopg import sql

    from reflect_sql.db.loader import copy_sqlite_to_postgres, schema_url

    urls = {}
    for db_id in BIRD_DBS:
        schema = f"test_{os.getpid()}_{db_id}"
        copy_sqlite_to_postgres(benchmarks_dir / "bird" / "dev_databases" / db_id / f"{db_id}.sqlite", pg_url, schema)
        urls[db_id] = schema_url(pg_url, schema)
    yield urls
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for db_id in BIRD_DBS:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(f"test_{os.getpid()}_{db_id}")))


def _finished_ids(results: Path) -> list[str]:
    """The question ids of the finished lines of a results.jsonl (a line cut by a kill has no newline)."""
    lines = results.read_bytes().splitlines(keepends=True) if results.exists() else []
    return [json.loads(line)["question_id"] for line in lines if line.endswith(b"\n")]


def _sigkill_after(command: list[str], results: Path, answers: int, extra_s: float = 0.0,
                   timeout_s: float = 120) -> tuple[int, list[str]]:
    """Start ``command`` (an evaluation writing ``results``), SIGKILL it once ``answers`` lines are
    finished and ``extra_s`` more seconds have passed (a kill may then land inside the next line);
    returns its exit code (-SIGKILL unless the run ended first) and the ids of the finished lines."""
    proc = subprocess.Popen(command)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            if len(_finished_ids(results)) >= answers:
                break
            time.sleep(0.01)
        time.sleep(extra_s)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return code, _finished_ids(results)


@pytest.fixture
def sigkill_after():
    return _sigkill_after
