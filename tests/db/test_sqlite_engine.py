"""SQLiteEngine: introspection of BIRD and of awkward hand-made schemas, execution, timeouts, errors."""
from __future__ import annotations

import json
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from reflect_sql.db import open_engine
from reflect_sql.db.base import ConnectionFailed, QueryRefused, QueryTimeout, SQLExecutionError, SQLSyntaxError
from reflect_sql.db.sqlite import SQLiteEngine
from reflect_sql.settings import Settings


def bird_db(benchmarks_dir: Path, db_id: str) -> Path:
    return benchmarks_dir / "bird" / "dev_databases" / db_id / f"{db_id}.sqlite"


def direct(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("db_id", ["student_club", "superhero"])
def test_bird_introspection_matches_the_file_and_tables_json(benchmarks_dir, db_id):
    path = bird_db(benchmarks_dir, db_id)
    tables_json = benchmarks_dir / "bird" / "dev_tables.json"
    entry = next(e for e in json.loads(tables_json.read_text()) if e["db_id"] == db_id)
    schema = open_engine(path).introspect(tables_json=str(tables_json), db_id=db_id)

    assert schema.dialect == "sqlite"
    assert [t.name for t in schema.tables] == entry["table_names_original"]
    for index, table in enumerate(schema.tables):
        expected = [name for t, name in entry["column_names_original"] if t == index]
        assert [c.name for c in table.columns] == expected
        assert table.row_count == direct(path, f'SELECT count(*) FROM "{table.name}"')[0][0]
        for column in table.columns:
            assert len(column.samples) <= Settings().sample_values_per_column
            assert len(set(map(repr, column.samples))) == len(column.samples), "samples are distinct"
            assert None not in column.samples
        assert all(c.primary_key == (c.name in table.primary_key) for c in table.columns)

    # Every key tables.json lists is in the schema (declared or added from the file).
    names = entry["column_names_original"]
    tables = entry["table_names_original"]
    found = {(fk.table, c, fk.ref_table, r) for fk in schema.foreign_keys for c, r in zip(fk.columns, fk.ref_columns)}
    for src, dst in entry["foreign_keys"]:
        assert (tables[names[src][0]], names[src][1], tables[names[dst][0]], names[dst][1]) in found


def test_bird_specifics(benchmarks_dir):
    club = open_engine(bird_db(benchmarks_dir, "student_club")).introspect()
    assert club.table("attendance").primary_key == ["link_to_event", "link_to_member"]
    assert club.table("zip_code").column("zip_code").type == "INTEGER"
    hero = open_engine(bird_db(benchmarks_dir, "superhero")).introspect()
    assert hero.table("superhero").primary_key == ["id"]
    assert any(fk.table == "superhero" and fk.columns == ["publisher_id"] and fk.ref_table == "publisher"
               for fk in hero.foreign_keys)
    assert hero.table("gender").column("gender").samples[:2] == [r[0] for r in direct(
        bird_db(benchmarks_dir, "superhero"), "SELECT gender FROM gender ORDER BY rowid LIMIT 2")]


@pytest.fixture()
def awkward_db(tmp_path: Path) -> Path:
    path = tmp_path / "awkward db.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE "order items" ("item id" INTEGER PRIMARY KEY, "we""ird" TEXT, blob_col BLOB, long_text TEXT);
        CREATE TABLE child (id INTEGER, parent_ref INTEGER REFERENCES "order items");
        CREATE TABLE Pair (a INTEGER, b INTEGER, PRIMARY KEY (b, a));
        CREATE TABLE pair_ref (x INTEGER, y INTEGER, FOREIGN KEY (x, y) REFERENCES pair (b, a));
        CREATE TABLE loose (item INTEGER, note);
        """
    )
    rows = [(i, f"v{i % 3}" if i % 4 else None, b"\x00\x01", "x" * 200) for i in range(1, 21)]
    conn.executemany('INSERT INTO "order items" VALUES (?, ?, ?, ?)', rows)
    conn.execute("INSERT INTO loose VALUES (1, 'é\u00e9'), (2, 3.5)")
    conn.commit()
    conn.close()
    return path


def test_awkward_names_keys_and_samples(awkward_db, tmp_path):
    tables_json = tmp_path / "tables.json"
    tables_json.write_text(json.dumps([{
        "db_id": "awkward db",
        "table_names_original": ["order items", "child", "Pair", "pair_ref", "loose"],
        "column_names_original": [[-1, "*"], [0, "item id"], [0, 'we"ird'], [0, "blob_col"], [0, "long_text"],
                                  [1, "id"], [1, "parent_ref"], [2, "a"], [2, "b"], [3, "x"], [3, "y"],
                                  [4, "item"], [4, "note"], [4, "ghost"]],
        # loose.item -> order items (new), child.parent_ref -> order items (declared: deduplicated),
        # and a pair naming a column the database lacks (dropped).
        "foreign_keys": [[11, 1], [6, 1], [13, 1]],
    }]))
    engine = SQLiteEngine(awkward_db, Settings(sample_values_per_column=2))
    schema = engine.introspect(tables_json=str(tables_json))  # db_id defaults to the file's stem

    items = schema.table("order items")
    assert [c.name for c in items.columns] == ["item id", 'we"ird', "blob_col", "long_text"]
    assert items.row_count == 20
    assert items.column('we"ird').samples == ["v1", "v2"]  # NULLs skipped, distinct, capped at 2
    assert items.column("blob_col").samples == []  # binary is not a sample
    assert items.column("long_text").samples == ["x" * 79 + "…"]
    assert schema.table("pair").primary_key == ["b", "a"]

    keys = {(fk.table, tuple(fk.columns), fk.ref_table, tuple(fk.ref_columns), fk.source) for fk in schema.foreign_keys}
    assert keys == {
        # REFERENCES without columns means the referenced table's primary key.
        ("child", ("parent_ref",), "order items", ("item id",), "declared"),
        ("pair_ref", ("x", "y"), "Pair", ("b", "a"), "declared"),
        ("loose", ("item",), "order items", ("item id",), "tables.json"),
    }
    assert engine.execute('SELECT "we""ird" FROM "order items" WHERE "item id" = 1').rows == [("v1",)]


def test_unknown_db_id_in_tables_json_is_a_clear_error(awkward_db, tmp_path):
    from reflect_sql.errors import UserError

    tables_json = tmp_path / "t.json"
    tables_json.write_text(json.dumps([{"db_id": "other"}]))
    with pytest.raises(UserError, match="'nope' is not in"):
        SQLiteEngine(awkward_db).introspect(tables_json=str(tables_json), db_id="nope")


def test_every_bird_gold_query_executes(benchmarks_dir):
    questions = json.loads((benchmarks_dir / "bird" / "dev.json").read_text())
    assert len(questions) == 287
    engines = {db_id: SQLiteEngine(bird_db(benchmarks_dir, db_id)) for db_id in {q["db_id"] for q in questions}}
    for q in questions:
        result = engines[q["db_id"]].execute(q["SQL"], timeout_s=120, max_rows=1_000_000)
        assert not result.truncated
        assert result.rows == direct(bird_db(benchmarks_dir, q["db_id"]), q["SQL"]), q["question_id"]


def test_max_rows_truncates(benchmarks_dir):
    engine = SQLiteEngine(bird_db(benchmarks_dir, "superhero"))
    result = engine.execute("SELECT hero_id, power_id FROM hero_power", max_rows=10)
    assert len(result.rows) == 10 and result.truncated and result.columns == ["hero_id", "power_id"]
    assert not engine.execute("SELECT * FROM hero_power", max_rows=5825).truncated
    assert engine.execute("SELECT * FROM hero_power", max_rows=5824).truncated
    assert len(SQLiteEngine(bird_db(benchmarks_dir, "superhero"), Settings(max_rows=3)).execute(
        "SELECT * FROM superhero").rows) == 3


@pytest.mark.parametrize("sql", [
    "SELECT count(*) FROM hero_power a, hero_power b, hero_attribute c",
    "SELECT a.hero_id FROM hero_power a CROSS JOIN hero_power b ORDER BY a.power_id * b.power_id DESC LIMIT 1",
])
def test_runaway_cross_join_stops_within_twice_its_timeout(benchmarks_dir, sql):
    engine = SQLiteEngine(bird_db(benchmarks_dir, "superhero"))
    start = time.monotonic()
    with pytest.raises(QueryTimeout, match="1 s timeout"):
        engine.execute(sql, timeout_s=1)
    assert time.monotonic() - start < 2
    assert engine.execute("SELECT count(*) FROM colour").rows == [(35,)]  # the connection still works


def test_error_kinds_and_check(benchmarks_dir):
    engine = SQLiteEngine(bird_db(benchmarks_dir, "superhero"))
    assert engine.check("SELECT id FROM superhero") is None
    assert "no such column: nope" in engine.check("SELECT nope FROM superhero")
    assert "no such table" in engine.check("SELECT * FROM heroes")
    assert "parse" in engine.check("SELEC id FROM superhero")
    with pytest.raises(QueryRefused):
        engine.check("DELETE FROM superhero")
    with pytest.raises(SQLSyntaxError, match="no such column"):
        engine.execute("SELECT nope FROM superhero")
    with pytest.raises(SQLSyntaxError, match="misuse of aggregate"):
        engine.execute("SELECT id FROM superhero WHERE count(*) > 1")
    # Compiles, fails while running.
    with pytest.raises(SQLExecutionError, match="integer overflow"):
        engine.execute("SELECT abs(-9223372036854775807 - 1)")


def test_missing_file_is_never_created(tmp_path):
    missing = tmp_path / "nope.sqlite"
    with pytest.raises(ConnectionFailed, match="nope.sqlite"):
        open_engine(missing)
    with pytest.raises(ConnectionFailed, match="not found"):
        SQLiteEngine(missing)
    assert not missing.exists()
    with pytest.raises(ConnectionFailed, match="directory"):
        open_engine(tmp_path)


def test_a_file_that_is_not_a_database(tmp_path):
    bogus = tmp_path / "bogus.sqlite"
    bogus.write_text("hello, not a database " * 100)
    with pytest.raises(ConnectionFailed, match="not a readable SQLite database"):
        SQLiteEngine(bogus)


def test_threads_get_their_own_connections(benchmarks_dir):
    engine = SQLiteEngine(bird_db(benchmarks_dir, "superhero"))
    queries = [f"SELECT count(*) FROM hero_power WHERE power_id <= {i}" for i in range(1, 41)]
    expected = [engine.execute(q).rows for q in queries]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda q: engine.execute(q).rows, queries))
    assert got == expected
    assert len(engine._opened) > 1
    engine.close()
    assert engine._opened == []


def test_invalid_utf8_does_not_fail_a_query(tmp_path):
    path = tmp_path / "bad.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (s TEXT)")
    conn.execute("INSERT INTO t VALUES (CAST(x'61ff62' AS TEXT))")
    conn.commit()
    conn.close()
    assert SQLiteEngine(path).execute("SELECT s FROM t").rows == [("a\ufffdb",)]


def test_a_value_past_max_value_bytes_is_an_error_not_a_gigabyte(tmp_path):
    path = tmp_path / "t.sqlite"
    sqlite3.connect(path).close()
    engine = SQLiteEngine(path, Settings(max_value_bytes=2**20))
    assert engine.execute("SELECT length(randomblob(1000000))").rows == [(1000000,)]
    with pytest.raises(SQLExecutionError, match="too big"):
        engine.execute("SELECT length(randomblob(1e9))")
    with pytest.raises(SQLExecutionError, match="too big"):
        engine.execute("SELECT length(randomblob(2000000))")


def test_scoring_caps_values_too(tmp_path):
    from reflect_sql.experiments.metrics import connect_read_only

    path = tmp_path / "t.sqlite"
    sqlite3.connect(path).close()
    with pytest.raises(sqlite3.DataError, match="too big"):
        connect_read_only(path).execute("SELECT randomblob(1e9)").fetchall()


def test_the_busy_timeout_is_the_setting(tmp_path):
    path = tmp_path / "t.sqlite"
    setup = sqlite3.connect(path)
    setup.execute("CREATE TABLE t (x)")
    setup.commit()
    patient = SQLiteEngine(path, Settings(sqlite_busy_timeout_s=10))
    impatient = SQLiteEngine(path, Settings(sqlite_busy_timeout_s=0))
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(patient.execute, "SELECT count(*) FROM t")
        with pytest.raises(SQLExecutionError, match="locked"):
            impatient.execute("SELECT count(*) FROM t")
        time.sleep(0.5)
        assert not waiting.done()  # the patient engine is still waiting for the lock
        locker.execute("COMMIT")
        assert waiting.result(timeout=10).rows == [(0,)]
