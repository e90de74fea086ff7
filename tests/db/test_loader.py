"""The admin loader: SQLite -> a PostgreSQL schema, robust to SQLite's loose typing."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from reflect_sql.db import open_engine
from reflect_sql.db.base import ConnectionFailed
from reflect_sql.db.loader import copy_sqlite_to_postgres, declared_to_pg, schema_url


@pytest.mark.parametrize("declared, pg", [
    ("INTEGER", "bigint"), ("int(11)", "bigint"), ("REAL", "double precision"), ("double", "double precision"),
    ("VARCHAR(20)", "text"), ("", "text"), ("DATE", "text"), ("NUMERIC(10,2)", "numeric"), ("BLOB", "text"),
])
def test_declared_types_follow_sqlite_affinity(declared, pg):
    assert declared_to_pg(declared) == pg


@pytest.fixture()
def messy_db(tmp_path: Path) -> Path:
    path = tmp_path / "messy.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE "Team Name" ("Team ID" INTEGER PRIMARY KEY, score REAL, label TEXT, born DATE);
        CREATE TABLE player (id INTEGER PRIMARY KEY, team INTEGER REFERENCES "Team Name", height INTEGER, nick TEXT);
        CREATE TABLE dup (k INTEGER PRIMARY KEY ON CONFLICT IGNORE, v);
        CREATE TABLE orphan (id INTEGER, parent INTEGER REFERENCES player (id));
        """
    )
    conn.executemany('INSERT INTO "Team Name" VALUES (?, ?, ?, ?)',
                     [(1, 1.5, "a\x00b", "2020-01-01"), (2, 3, "b", None)])
    # BIRD-style dirt: an empty string and a real in an INTEGER column, bytes in a TEXT column.
    conn.executemany("INSERT INTO player VALUES (?, ?, ?, ?)",
                     [(1, 1, 180, "x"), (2, 2, "", b"\xffraw"), (3, 1, 170.5, None)])
    conn.executemany("INSERT INTO orphan VALUES (?, ?)", [(1, 1), (2, 99)])
    conn.commit()
    conn.close()
    return path


@pytest.mark.postgres
def test_messy_data_loads_and_reads_back(pg_url, pg_reader, messy_db):
    schema = f"test_{os.getpid()}_messy"
    try:
        for _ in range(2):  # idempotent: a second load replaces the first
            report = copy_sqlite_to_postgres(messy_db, pg_url, schema)
        assert report.rows == {"Team Name": 2, "player": 3, "dup": 0, "orphan": 2}
        assert report.types["player"] == {"id": "bigint", "team": "bigint", "height": "text", "nick": "text"}
        assert report.types["Team Name"]["score"] == "double precision"
        assert any(s.startswith("foreign key orphan(parent) -> player") for s in report.skipped)

        engine = open_engine(pg_reader(schema_url(pg_url, schema)))
        loaded = engine.introspect()
        assert loaded.table("Team Name").primary_key == ["Team ID"]
        keys = {(fk.table, tuple(fk.columns), fk.ref_table, tuple(fk.ref_columns)) for fk in loaded.foreign_keys}
        assert keys == {("player", ("team",), "Team Name", ("Team ID",))}  # orphan's key is violated: skipped
        assert engine.execute('SELECT label FROM "Team Name" ORDER BY "Team ID"').rows == [("ab",), ("b",)]
        assert engine.execute("SELECT height, nick FROM player ORDER BY id").rows == [
            ("180", "x"), ("", "\ufffdraw"), ("170.5", None)]
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_missing_sqlite_file(tmp_path):
    with pytest.raises(ConnectionFailed, match="not found"):
        copy_sqlite_to_postgres(tmp_path / "none.sqlite", "postgresql://127.0.0.1:1/x", "s")
    assert not (tmp_path / "none.sqlite").exists()


def test_schema_url_replaces_an_existing_schema_parameter():
    url = schema_url("postgresql://u@h:5432/db?schema=old&sslmode=disable", "new")
    assert url == "postgresql://u@h:5432/db?sslmode=disable&schema=new"
