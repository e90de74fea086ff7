"""Least privilege on PostgreSQL: a superuser (or a role reaching server files) is refused unless
--allow-superuser says otherwise, with a warning on every run; `db grant-readonly` prints the SQL of a
role the engine accepts, and the server itself keeps that role from writing and from server files.

The role the other PostgreSQL tests query as (``pg_reader`` in tests/conftest.py) is made by the
same SQL, so the hostile table (tests/db/test_hostile.py) runs under it."""
from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import errors as pg_errors
from psycopg import sql

from reflect_sql.cli import main
from reflect_sql.db import EngineError, PrivilegedRole, open_engine
from reflect_sql.db.loader import schema_url
from reflect_sql.db.postgres import split_schema
from reflect_sql.db.privileges import read_only_role_sql
from reflect_sql.settings import Settings


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reflect_sql", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def _as(url: str, role: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rsplit('@', 1)[-1]}"))


@pytest.fixture()
def superhero_schema(bird_pg) -> str:
    return split_schema(bird_pg["superhero"])[1]


@pytest.fixture()
def roles(pg_url):
    """Roles a test creates, dropped afterwards."""
    made: list[str] = []
    yield made
    with psycopg.connect(pg_url, autocommit=True) as admin:
        for role in made:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.mark.postgres
def test_a_superuser_is_refused_with_one_line_that_says_how_to_make_a_read_only_role(pg_url, superhero_schema, capsys):
    url = schema_url(pg_url, superhero_schema)
    with pytest.raises(PrivilegedRole) as refused:
        open_engine(url)
    message = refused.value.message
    for needed in ("superuser", "reflect-sql db grant-readonly", "pg_read_all_data", "default_transaction_read_only",
                   "--allow-superuser"):
        assert needed in message

    assert main(["db", "sql", "--db", url, "SELECT count(*) FROM superhero"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.strip().splitlines()
    assert line.startswith("reflect-sql: error: refusing to query") and "grant-readonly" in line
    assert main(["db", "schema", "--db", url]) == 2  # every command that opens the engine


@pytest.mark.postgres
def test_allow_superuser_overrides_with_a_warning_on_every_run(pg_url, superhero_schema):
    url = schema_url(pg_url, superhero_schema)
    for run in range(2):  # each run warns again: the risk is taken per run, not once for all
        done = _cli("db", "sql", "--db", url, "SELECT count(*) FROM superhero", "--json", "--allow-superuser")
        assert done.returncode == 0, done.stderr
        assert '"rows": [[750]]' in done.stdout
        warnings = [line for line in done.stderr.splitlines() if line.startswith("reflect-sql: warning:")]
        assert len(warnings) == 1 and "superuser" in warnings[0] and "--allow-superuser" in warnings[0], done.stderr
    # The setting behind the flag, from the environment, does the same.
    done = _cli("db", "sql", "--db", url, "SELECT 1", REFLECT_SQL_PG_ALLOW_SUPERUSER="true")
    assert done.returncode == 0 and "reflect-sql: warning:" in done.stderr


@pytest.mark.postgres
def test_a_role_that_reaches_server_files_is_refused_too(pg_url, superhero_schema, roles):
    role = f"file_reader_{os.getpid()}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE pg_read_all_data, pg_read_server_files")
                      .format(sql.Identifier(role)))
        roles.append(role)
    url = _as(schema_url(pg_url, superhero_schema), role)
    with pytest.raises(PrivilegedRole, match=f"role {role}, a member of pg_read_server_files"):
        open_engine(url)
    with psycopg.connect(split_schema(url)[0]) as conn:  # what the refusal spares: it reads server files
        conn.execute("CREATE TEMP TABLE leak (line text)")
        conn.execute("COPY leak FROM '/etc/hostname'")
        assert conn.execute("SELECT line FROM leak").fetchone()[0]


@pytest.mark.postgres
def test_the_printed_role_reads_only_its_schema_and_the_server_refuses_it_writes_and_files(
        pg_url, bird_pg, superhero_schema, roles, capsys, monkeypatch):
    role = f"granted_{os.getpid()}"
    url = _as(schema_url(pg_url, superhero_schema), role)
    assert main(["db", "grant-readonly", "--db", schema_url(pg_url, superhero_schema), "--role", role]) == 0
    script = capsys.readouterr().out
    assert script == read_only_role_sql(schema_url(pg_url, superhero_schema), role)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(script)  # what an administrator pipes into psql
        roles.append(role)

    # The engine accepts it without a warning, and reads the schema it was granted.
    with open_engine(url) as engine:
        assert engine.execute("SELECT count(*) FROM superhero").rows == [(750,)]
    assert "warning" not in capsys.readouterr().err

    # The server alone, no gate and no READ ONLY of ours: a plain session of the role.
    with psycopg.connect(split_schema(url)[0], autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(superhero_schema)))
        assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
        assert conn.execute("SHOW default_transaction_read_only").fetchone() == ("on",)
        with pytest.raises(pg_errors.ReadOnlySqlTransaction):
            conn.execute("DELETE FROM colour")
        conn.execute("SET default_transaction_read_only = off")  # it may flip its own default...
        with pytest.raises(pg_errors.InsufficientPrivilege):
            conn.execute("DELETE FROM colour")  # ...and still holds no right to write
        for call in ("SELECT pg_read_file('/etc/hostname')", "SELECT lo_import('/etc/hostname')",
                     "SELECT * FROM pg_ls_dir('.')", "COPY colour TO PROGRAM 'true'"):
            with pytest.raises(pg_errors.InsufficientPrivilege):
                conn.execute(call)
        other = split_schema(bird_pg["student_club"])[1]
        with pytest.raises(pg_errors.InsufficientPrivilege):  # another schema of the database
            conn.execute(sql.SQL("SELECT count(*) FROM {}.member").format(sql.Identifier(other)))

    # With the gate switched off, the engine on this role still reads no server file; a superuser
    # allowed in does (what the refusal by default is for).
    monkeypatch.setattr("reflect_sql.db.postgres.guard_sql", lambda *_: None)
    with open_engine(url) as engine, pytest.raises(EngineError, match="permission denied"):
        engine.execute("SELECT pg_read_file('/etc/hostname')")
    with open_engine(schema_url(pg_url, superhero_schema), Settings(pg_allow_superuser=True)) as engine:
        assert engine.execute("SELECT pg_read_file('/etc/hostname')").rows[0][0]


@pytest.mark.postgres
def test_the_fixtures_reader_is_the_printed_role(bird_pg):
    """Every PostgreSQL test's engine runs as a role the refusal accepts (made by read_only_role_sql)."""
    with psycopg.connect(split_schema(bird_pg["superhero"])[0]) as conn:
        user, superuser = conn.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        granted = conn.execute("SELECT pg_has_role(current_user, 'pg_read_all_data', 'MEMBER')").fetchone()[0]
    assert user.startswith("reflect_reader_") and not superuser and granted


@pytest.mark.parametrize("url, role, error", [
    ("shop.sqlite", "r", "must be a postgresql:// URL"),
    ("postgresql://h:5432/db", "pg_monitor2", "reserved"),
    ("postgresql://h:5432/db?schema=a%0Ab", "r", "control character"),
])
def test_grant_readonly_refuses_bad_input_in_one_line(url, role, error, capsys):
    assert main(["db", "grant-readonly", "--db", url, "--role", role]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and error in err[0]
