"""Fixtures shared across rooms: the shared benchmark data and a PostgreSQL server.

PostgreSQL tests (``@pytest.mark.postgres``) use the server that ``REFLECT_SQL_TEST_PG_URL`` names;
without it, a throwaway server that this session starts on Debian's ``postgresql`` binaries and
stops at its end; without those either, they skip and say why.
"""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
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


def _debian_pg_ctl() -> Path | None:
    """The newest ``pg_ctl`` of Debian's ``postgresql`` packages, or None."""
    found = [p for p in Path("/usr/lib/postgresql").glob("*/bin/pg_ctl") if re.fullmatch(r"\d+", p.parts[-3])]
    return max(found, key=lambda p: int(p.parts[-3]), default=None)


@contextlib.contextmanager
def _throwaway_postgres(pg_ctl: Path) -> Iterator[str]:
    """A PostgreSQL server on 127.0.0.1 and a free port, its data under a fresh temp folder;
    yields its URL, then stops it and removes the folder, also when the session failed or was
    interrupted. pytest-postgresql's executor runs initdb, starts the server, waits until it takes
    connections and stops it. PostgreSQL refuses to run as root, so a root caller runs ``pg_ctl``
    as the ``postgres`` user (created by Debian's package) through a one-line wrapper."""
    import port_for
    from pytest_postgresql.executors import PostgreSQLExecutor

    folder = Path(tempfile.mkdtemp(prefix="reflect-sql-test-pg-"))
    server = folder / "server"  # data directory, log and socket: the server's own
    executor = None
    try:
        server.mkdir()
        executable = pg_ctl
        if os.geteuid() == 0:
            try:
                postgres = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running the tests as root needs the `postgres` user to run PostgreSQL "
                                   "(Debian's postgresql package creates it)") from None
            folder.chmod(0o755)  # postgres may enter; the wrapper stays root's
            os.chown(server, postgres.pw_uid, postgres.pw_gid)
            executable = folder / "pg_ctl"
            executable.write_text("#!/bin/sh\n"
                                  f"cd {shlex.quote(str(server))} && "
                                  f'exec runuser -u postgres -- {shlex.quote(str(pg_ctl))} "$@"\n')
            executable.chmod(0o755)
        port = port_for.select_random()
        executor = PostgreSQLExecutor(
            executable=str(executable), host="127.0.0.1", port=port, datadir=str(server / "data"),
            unixsocketdir=str(server), logfile=str(server / "log"), startparams="-w", dbname="postgres",
            user="postgres",
            # A throwaway cluster: nothing in it needs to survive a crash.
            postgres_options="-c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off "
                             "-c synchronous_commit=off")
        try:
            executor.start()
        except Exception as error:
            log = server / "log"
            tail = log.read_text(errors="replace").strip().splitlines()[-5:] if log.exists() else []
            raise RuntimeError(f"the throwaway PostgreSQL server ({pg_ctl}) did not start: {error}"
                               + "".join(f"\n  {line}" for line in tail)) from None
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        if executor is not None:
            with contextlib.suppress(Exception):
                executor.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """The server for PostgreSQL tests: ``REFLECT_SQL_TEST_PG_URL`` when set, else a throwaway one
    for this session on Debian's binaries, else a skip that says what is missing."""
    url = os.environ.get("REFLECT_SQL_TEST_PG_URL")
    if url:
        yield url
        return
    pg_ctl = _debian_pg_ctl()
    if pg_ctl is None:
        pytest.skip("no PostgreSQL server: install Debian's postgresql (none under /usr/lib/postgresql/*/bin) "
                    "or set REFLECT_SQL_TEST_PG_URL")
    with _throwaway_postgres(pg_ctl) as url:
        yield url


@pytest.fixture(scope="session")
def pg_reader(pg_url: str) -> Iterator[Callable[[str], str]]:
    """A real least-privilege login role, made by running the SQL `reflect-sql db grant-readonly`
    prints (pg_read_all_data, default_transaction_read_only) as ``pg_url``, the superuser. Yields
    ``as_reader(url)``: the same server, database and ``?schema=`` as that role. Engines refuse a
    superuser, so tests load their data as ``pg_url`` and query it as the reader."""
    import secrets
    from urllib.parse import quote, urlsplit, urlunsplit

    import psycopg
    from psycopg import sql

    from reflect_sql.db.privileges import read_only_role_sql

    role, password = f"reflect_reader_{os.getpid()}", secrets.token_hex(12)

    def drop(admin) -> None:
        if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone():
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))

    with psycopg.connect(pg_url, autocommit=True) as admin:
        drop(admin)  # left by an earlier session of the same process id
        admin.execute(read_only_role_sql(pg_url, role))
        admin.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))

    def as_reader(url: str) -> str:
        parts = urlsplit(url)
        host = parts.netloc.rsplit("@", 1)[-1]
        return urlunsplit(parts._replace(netloc=f"{quote(role)}:{quote(password)}@{host}"))

    yield as_reader
    with contextlib.suppress(Exception), psycopg.connect(pg_url, autocommit=True) as admin:
        drop(admin)


@pytest.fixture(scope="session")
def bird_pg(pg_url: str, pg_reader, benchmarks_dir: Path):
    """The BIRD dev databases copied into PostgreSQL once per session: ``{db_id: engine URL}``, URLs
    of the read-only role ``pg_reader`` (the data is written as ``pg_url``).

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
        urls[db_id] = pg_reader(schema_url(pg_url, schema))
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


def _signal_when(command: list[str], ready: Callable[[], bool], signum: int, timeout_s: float = 120,
                 cwd: Path | None = None) -> tuple[int, float, str]:
    """Start ``command``, send it ``signum`` once ``ready()`` holds; returns its exit code, the seconds
    it took to exit after the signal, and its stderr. Fails if it ends before the signal."""
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: nothing blocks on a full pipe
        proc = subprocess.Popen(command, stderr=err, text=True, cwd=cwd)
        try:
            deadline = time.monotonic() + timeout_s
            while not ready():
                if proc.poll() is not None:
                    err.seek(0)
                    raise AssertionError(f"it ended before the signal: {err.read()[-2000:]}")
                assert time.monotonic() < deadline, "it never got ready for the signal"
                time.sleep(0.02)
            sent = time.monotonic()
            os.kill(proc.pid, signum)
            code = proc.wait(timeout=60)
            seconds = time.monotonic() - sent
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        return code, seconds, err.read()


@pytest.fixture
def signal_when():
    return _signal_when


@pytest.fixture(autouse=True)
def no_shipped_programs(tmp_path_factory, monkeypatch):
    """Runs on the embedded models' names load the programs shipped in programs/compiled/ by
    default; tests run the bare signatures unless they point ``COMPILED_DIR`` at programs of their
    own (tests/experiments/test_default_program.py), so a newly shipped program changes no test's
    prompts. The shipped files themselves are tested there, against the real folder."""
    from reflect_sql.programs import shipped

    monkeypatch.setattr(shipped, "COMPILED_DIR", tmp_path_factory.mktemp("no-compiled-programs"))
