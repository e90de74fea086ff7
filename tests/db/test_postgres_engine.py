"""PostgresEngine on the BIRD data loaded into PostgreSQL: introspection equal to SQLite's, the cost
cap, statement_timeout, error kinds, truncation, threads and reconnecting."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from reflect_sql.db import open_engine
from reflect_sql.db.base import ConnectionFailed, QueryRefused, QueryTimeout, SQLExecutionError, SQLSyntaxError
from reflect_sql.db.loader import schema_url
from reflect_sql.db.postgres import PostgresEngine, redact, split_schema
from reflect_sql.settings import Settings

pytestmark = pytest.mark.postgres

CROSS_JOIN = "SELECT count(*) FROM hero_power a, hero_power b, hero_attribute c"


def key_set(schema):
    return {(fk.table, tuple(fk.columns), fk.ref_table, tuple(fk.ref_columns)) for fk in schema.foreign_keys}


@pytest.mark.parametrize("db_id", ["student_club", "superhero"])
def test_introspection_matches_sqlite(bird_pg, benchmarks_dir, db_id):
    sqlite_schema = open_engine(benchmarks_dir / "bird" / "dev_databases" / db_id / f"{db_id}.sqlite").introspect()
    engine = open_engine(bird_pg[db_id])
    assert isinstance(engine, PostgresEngine)
    pg_schema = engine.introspect(tables_json=str(benchmarks_dir / "bird" / "dev_tables.json"), db_id=db_id)

    assert pg_schema.dialect == "postgres"
    assert [t.name for t in pg_schema.tables] == [t.name for t in sqlite_schema.tables]
    for lite, pg in zip(sqlite_schema.tables, pg_schema.tables):
        assert [c.name for c in pg.columns] == [c.name for c in lite.columns]
        assert pg.primary_key == lite.primary_key
        assert pg.row_count == lite.row_count
        for lc, pc in zip(lite.columns, pg.columns):
            assert pc.samples == lc.samples, (pg.name, pc.name)
    assert key_set(pg_schema) == key_set(sqlite_schema) and key_set(pg_schema)
    assert all(fk.source == "declared" for fk in pg_schema.foreign_keys)


def test_execute_and_truncate(bird_pg):
    engine = open_engine(bird_pg["superhero"])
    result = engine.execute("SELECT count(*) AS n FROM superhero")
    assert result.columns == ["n"] and result.rows == [(750,)] and not result.truncated
    assert result.extra["plan_cost"] > 0
    result = engine.execute("SELECT hero_id, power_id FROM hero_power ORDER BY hero_id, power_id", max_rows=7)
    assert len(result.rows) == 7 and result.truncated
    assert not engine.execute("SELECT * FROM hero_power", max_rows=5825).truncated
    assert engine.execute("SELECT 1 WHERE false").rows == []


def test_cost_cap_refuses_a_cartesian_explosion_before_it_runs(bird_pg):
    engine = open_engine(bird_pg["superhero"])
    start = time.monotonic()
    with pytest.raises(QueryRefused, match="pg_max_plan_cost"):
        engine.execute(CROSS_JOIN, timeout_s=30)
    assert time.monotonic() - start < 3


def test_runaway_cross_join_stops_within_twice_its_timeout(bird_pg):
    engine = open_engine(bird_pg["superhero"], Settings(pg_max_plan_cost=1e18))  # let it past the cap
    start = time.monotonic()
    with pytest.raises(QueryTimeout, match="1 s timeout"):
        engine.execute(CROSS_JOIN, timeout_s=1)
    assert time.monotonic() - start < 2
    assert engine.execute("SELECT count(*) FROM colour").rows == [(35,)]


def test_statement_timeout_stops_a_cheap_looking_slow_query(bird_pg):
    # The planner costs this at about a million (well under the cap); it runs for many seconds.
    engine = open_engine(bird_pg["superhero"])
    start = time.monotonic()
    with pytest.raises(QueryTimeout):
        engine.execute("SELECT count(*) FROM generate_series(1, 1000000000)", timeout_s=1)
    assert time.monotonic() - start < 2


def test_error_kinds_and_check(bird_pg):
    engine = open_engine(bird_pg["superhero"])
    assert engine.check("SELECT id FROM superhero") is None
    text = engine.check("SELECT nope FROM superhero")
    assert 'column "nope" does not exist' in text
    assert "EXPLAIN" not in text and "LINE 1: SELECT nope FROM superhero" in text
    with pytest.raises(QueryRefused):
        engine.check("DROP TABLE superhero")
    with pytest.raises(SQLSyntaxError, match="does not exist"):
        engine.execute("SELECT * FROM heroes")
    with pytest.raises(SQLExecutionError, match="invalid input syntax"):
        engine.execute("SELECT CAST(superhero_name AS integer) FROM superhero")
    assert engine.execute("SELECT 1").rows == [(1,)]  # the session survives errors


def test_threads_and_reconnect_after_the_server_drops_the_connection(bird_pg):
    engine = open_engine(bird_pg["superhero"])
    queries = [f"SELECT count(*) FROM hero_power WHERE power_id <= {i}" for i in range(1, 21)]
    expected = [engine.execute(q).rows for q in queries]
    with ThreadPoolExecutor(max_workers=3) as pool:
        assert list(pool.map(lambda q: engine.execute(q).rows, queries)) == expected

    pid = engine.execute("SELECT pg_backend_pid()").rows[0][0]
    conninfo, _ = split_schema(bird_pg["superhero"])
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    assert engine.execute("SELECT count(*) FROM superhero").rows == [(750,)]
    assert engine.execute("SELECT pg_backend_pid()").rows[0][0] != pid


def test_schema_from_search_path_option(bird_pg):
    conninfo, schema = split_schema(bird_pg["superhero"])
    sep = "&" if "?" in conninfo else "?"
    engine = open_engine(f"{conninfo}{sep}options=-csearch_path%3D{schema}")
    assert engine.current_schema == schema
    assert engine.execute("SELECT count(*) FROM superhero").rows == [(750,)]


def test_connection_errors_are_clear(pg_url):
    with pytest.raises(ConnectionFailed, match="does not exist"):
        open_engine(schema_url(pg_url, "no_such_schema_here"))
    with pytest.raises(ConnectionFailed, match="cannot connect"):
        open_engine("postgresql://nobody:secret@127.0.0.1:1/x")
    assert redact("postgresql://u:secret@h/db") == "postgresql://u:***@h/db"
