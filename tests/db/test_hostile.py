"""Hostile statements are refused on both engines, and the data is unchanged afterwards.

The SQLite target is a writable copy of BIRD's superhero database, so nothing but the engine stands
between a statement and the file. The PostgreSQL target is the same data loaded into a schema, plus
a sequence (``nextval`` writes one even in a SELECT). A second set of tests switches the sqlglot gate
off and shows that the connection alone still refuses every write.
"""
from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

import pytest

from reflect_sql.db.base import EngineError, QueryRefused
from reflect_sql.db.postgres import PostgresEngine, split_schema
from reflect_sql.db.sqlite import SQLiteEngine

# (id, statement): refused on both engines.
HOSTILE = [
    ("drop", "DROP TABLE superhero"),
    ("delete", "DELETE FROM superhero"),
    ("update", "UPDATE superhero SET full_name = 'pwned'"),
    ("update-in-cte", "WITH x AS (UPDATE superhero SET full_name = 'pwned' RETURNING id) SELECT * FROM x"),
    ("writable-cte-returning", "WITH d AS (DELETE FROM hero_power RETURNING *) SELECT count(*) FROM d"),
    ("insert-select", "INSERT INTO colour (id, colour) SELECT id + 1000, colour FROM colour"),
    ("insert-or-replace", "INSERT OR REPLACE INTO colour VALUES (1, 'pwned')"),
    ("replace-into", "REPLACE INTO colour VALUES (1, 'pwned')"),
    ("merge", "MERGE INTO colour c USING colour s ON c.id = s.id WHEN MATCHED THEN UPDATE SET colour = 'pwned'"),
    ("select-into", "SELECT * INTO stolen FROM superhero"),
    ("create-temp-table-as", "CREATE TEMP TABLE stolen AS SELECT * FROM superhero"),
    ("create-view", "CREATE VIEW v AS SELECT 1"),
    ("alter", "ALTER TABLE superhero ADD COLUMN pwned INTEGER"),
    ("truncate", "TRUNCATE superhero"),
    ("attach", "ATTACH DATABASE '/tmp/reflect_sql_evil.db' AS evil"),
    ("detach", "DETACH DATABASE main"),
    ("pragma-writable-schema", "PRAGMA writable_schema = ON"),
    ("pragma-query-only-off", "PRAGMA query_only = OFF"),
    ("stacked-drop", "SELECT 1; DROP TABLE superhero"),
    ("stacked-after-comment", "SELECT 1 -- harmless\n; DELETE FROM superhero"),
    ("comment-hidden-drop", "/* just a comment */ DROP TABLE superhero -- SELECT 1"),
    ("comment-then-stacked", "SELECT id FROM superhero /* ; */ ; DROP TABLE colour"),
    ("transaction", "BEGIN; DELETE FROM superhero; COMMIT"),
    ("savepoint", "SAVEPOINT s1"),
    ("pg-read-file", "SELECT pg_read_file('/etc/passwd')"),
    ("pg-ls-dir-qualified", "SELECT * FROM pg_catalog.pg_ls_dir('.')"),
    ("copy-to-program", "COPY superhero TO PROGRAM 'touch /tmp/reflect_sql_pwned'"),
    ("copy-from-file", "COPY colour FROM '/etc/passwd'"),
    ("load-extension", "SELECT load_extension('/tmp/evil.so')"),
    ("readfile-writefile", "SELECT readfile('/etc/passwd'), writefile('/tmp/reflect_sql_pwned', 'x')"),
    ("nextval", "SELECT nextval('hero_seq')"),
    ("setval-in-subquery", "SELECT * FROM superhero WHERE id IN (SELECT setval('hero_seq', 100))"),
    ("pg-sleep", "SELECT pg_sleep(30)"),
    ("set-config", "SELECT set_config('default_transaction_read_only', 'off', false)"),
    ("terminate-backend", "SELECT pg_terminate_backend(pg_backend_pid())"),
    ("advisory-lock", "SELECT pg_advisory_lock(1)"),
    ("query-to-xml", "SELECT query_to_xml('DELETE FROM superhero', true, true, '')"),
    ("lo-import", "SELECT lo_import('/etc/passwd')"),
    ("dblink", "SELECT * FROM dblink('dbname=postgres', 'DELETE FROM superhero') AS t(x int)"),
    ("for-update", "SELECT * FROM superhero FOR UPDATE"),
    ("lock", "LOCK TABLE superhero IN ACCESS EXCLUSIVE MODE"),
    ("set", "SET statement_timeout = 0"),
    ("vacuum", "VACUUM"),
    ("reindex", "REINDEX"),
    ("analyze", "ANALYZE"),
    ("do-block", "DO $$ BEGIN DELETE FROM superhero; END $$"),
    ("call", "CALL cleanup()"),
    ("grant", "GRANT ALL ON superhero TO PUBLIC"),
    ("comment-on", "COMMENT ON TABLE superhero IS 'pwned'"),
    ("explain-analyze-delete", "EXPLAIN ANALYZE DELETE FROM superhero"),
    ("discard", "DISCARD ALL"),
]

PWNED_FILES = [Path("/tmp/reflect_sql_pwned"), Path("/tmp/reflect_sql_evil.db")]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def sqlite_copy(benchmarks_dir, tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("hostile") / "superhero.sqlite"
    shutil.copyfile(benchmarks_dir / "bird" / "dev_databases" / "superhero" / "superhero.sqlite", target)
    target.chmod(0o644)  # writable: the engine, not the file mode, must keep it unchanged
    return target


@pytest.fixture(scope="module")
def pg_target(bird_pg, pg_url):
    """(engine URL, schema, admin connection) with a sequence to attack. The engine connects as the
    read-only role of the test fixtures (made with `reflect-sql db grant-readonly`'s SQL), the admin
    connection as the superuser."""
    import psycopg
    from psycopg import sql

    url = bird_pg["superhero"]
    _, schema = split_schema(url)
    admin = psycopg.connect(pg_url, autocommit=True)
    admin.execute(sql.SQL("CREATE SEQUENCE IF NOT EXISTS {}").format(sql.Identifier(schema, "hero_seq")))
    admin.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    yield url, schema, admin
    admin.close()


def pg_fingerprint(admin, schema: str) -> tuple:
    """Everything a hostile statement could change: relations, rows, the sequence, comments, ACLs."""
    relations = admin.execute(
        "SELECT c.relname, c.relkind, coalesce(c.relacl::text, ''), coalesce(obj_description(c.oid), '') "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s ORDER BY 1",
        [schema],
    ).fetchall()
    digests = [
        admin.execute(f'SELECT md5(string_agg(t::text, \'|\' ORDER BY t::text)) FROM "{name}" t').fetchone()[0]
        for name, kind, *_ in relations
        if kind == "r"
    ]
    sequence = admin.execute("SELECT last_value, is_called FROM hero_seq").fetchone()
    temp_tables = admin.execute("SELECT count(*) FROM pg_class WHERE relpersistence = 't'").fetchone()[0]
    large_objects = admin.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0]
    return relations, digests, sequence, temp_tables, large_objects


def _assert_refused(engine, sql: str) -> None:
    start = time.monotonic()
    with pytest.raises(QueryRefused) as caught:
        engine.execute(sql, timeout_s=5)
    assert caught.value.message, "a refusal must say why"
    with pytest.raises(QueryRefused):
        engine.check(sql)
    assert time.monotonic() - start < 2, "refused statements must not run (pg_sleep, cross joins...)"


@pytest.mark.parametrize("name, sql", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_refused_on_sqlite(sqlite_copy, name, sql):
    before = sha256(sqlite_copy)
    with SQLiteEngine(sqlite_copy) as engine:
        _assert_refused(engine, sql)
        assert engine.execute("SELECT count(*) FROM superhero").rows == [(750,)]
    assert sha256(sqlite_copy) == before
    assert not any(p.exists() for p in PWNED_FILES)


@pytest.mark.postgres
@pytest.mark.parametrize("name, sql", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_refused_on_postgres(pg_target, name, sql):
    url, schema, admin = pg_target
    before = pg_fingerprint(admin, schema)
    with PostgresEngine(url) as engine:
        _assert_refused(engine, sql)
        assert engine.execute("SELECT count(*) FROM superhero").rows == [(750,)]
    assert pg_fingerprint(admin, schema) == before
    assert not any(p.exists() for p in PWNED_FILES)


def test_the_table_is_large_enough():
    assert len(HOSTILE) >= 30 and len({n for n, _ in HOSTILE}) == len(HOSTILE)


# --- defence in depth: the gate switched off -----------------------------------------------------

SQLITE_WRITES = [
    "DROP TABLE superhero", "DELETE FROM superhero", "UPDATE superhero SET full_name = 'x'",
    "WITH x AS (SELECT 1) UPDATE superhero SET full_name = 'x'",
    "INSERT INTO colour (id, colour) SELECT id + 1000, colour FROM colour", "REPLACE INTO colour VALUES (1, 'x')",
    "CREATE TEMP TABLE stolen AS SELECT * FROM superhero", "CREATE TABLE stolen (x)", "CREATE VIEW v AS SELECT 1",
    "ALTER TABLE superhero ADD COLUMN pwned INTEGER", "ATTACH DATABASE '/tmp/reflect_sql_evil.db' AS evil",
    "PRAGMA writable_schema = ON", "PRAGMA query_only = OFF", "SELECT 1; DROP TABLE superhero",
    "BEGIN", "SAVEPOINT s1", "VACUUM", "ANALYZE", "SELECT load_extension('/tmp/evil.so')",
    "CREATE INDEX i ON superhero (full_name)",
]


@pytest.mark.parametrize("sql", SQLITE_WRITES)
def test_sqlite_connection_refuses_writes_without_the_gate(sqlite_copy, monkeypatch, sql):
    monkeypatch.setattr("reflect_sql.db.sqlite.guard_sql", lambda *_: None)
    before = sha256(sqlite_copy)
    with SQLiteEngine(sqlite_copy) as engine:
        with pytest.raises(EngineError):
            engine.execute(sql)
    assert sha256(sqlite_copy) == before
    assert not any(p.exists() for p in PWNED_FILES)


PG_WRITES = [
    "DROP TABLE superhero", "DELETE FROM superhero", "UPDATE superhero SET full_name = 'x'",
    "WITH d AS (DELETE FROM hero_power RETURNING *) SELECT count(*) FROM d",
    "INSERT INTO colour (id, colour) SELECT id + 1000, colour FROM colour",
    "SELECT * INTO stolen FROM superhero", "CREATE TEMP TABLE stolen AS SELECT * FROM superhero",
    "TRUNCATE superhero", "ALTER TABLE superhero ADD COLUMN pwned int", "SELECT nextval('hero_seq')",
    "SELECT setval('hero_seq', 100)", "SELECT 1; DROP TABLE superhero", "LOCK TABLE superhero",
    "COPY superhero TO PROGRAM 'touch /tmp/reflect_sql_pwned'", "DO $$ BEGIN DELETE FROM superhero; END $$",
    "GRANT ALL ON superhero TO PUBLIC", "COMMENT ON TABLE superhero IS 'pwned'", "SELECT * FROM superhero FOR UPDATE",
    "COMMIT; DELETE FROM superhero",
]


@pytest.mark.postgres
@pytest.mark.parametrize("sql", PG_WRITES)
def test_postgres_session_refuses_writes_without_the_gate(pg_target, monkeypatch, sql):
    monkeypatch.setattr("reflect_sql.db.postgres.guard_sql", lambda *_: None)
    url, schema, admin = pg_target
    before = pg_fingerprint(admin, schema)
    with PostgresEngine(url) as engine:
        with pytest.raises(EngineError):
            engine.execute(sql)
    assert pg_fingerprint(admin, schema) == before
    assert not any(p.exists() for p in PWNED_FILES)


@pytest.mark.postgres
def test_postgres_stays_read_only_after_the_session_default_is_flipped(pg_target, monkeypatch):
    # set_config itself is harmless inside READ ONLY; the explicit BEGIN READ ONLY per statement
    # is what keeps the next statement read-only.
    monkeypatch.setattr("reflect_sql.db.postgres.guard_sql", lambda *_: None)
    url, schema, admin = pg_target
    before = pg_fingerprint(admin, schema)
    with PostgresEngine(url) as engine:
        engine.execute("SELECT set_config('default_transaction_read_only', 'off', false)")
        with pytest.raises(QueryRefused, match="read-only"):
            engine.execute("DELETE FROM colour")
    assert pg_fingerprint(admin, schema) == before


@pytest.mark.postgres
def test_what_a_read_only_transaction_admits_is_rolled_back(pg_target, monkeypatch):
    # lo_import runs inside READ ONLY (for a superuser it even reads a server file): only the gate
    # stops it. Without the gate, the rollback after every statement still leaves nothing behind.
    monkeypatch.setattr("reflect_sql.db.postgres.guard_sql", lambda *_: None)
    url, schema, admin = pg_target
    before = pg_fingerprint(admin, schema)
    with PostgresEngine(url) as engine:
        try:
            engine.execute("SELECT lo_import('/etc/hostname')")
        except EngineError:
            pass  # a non-superuser role is refused outright
    assert pg_fingerprint(admin, schema) == before
