"""Load a generated SmartRestaurant SQLite file into PostgreSQL under the PostgreSQL-first schema.

The db room's generic ``copy_sqlite_to_postgres`` maps SQLite's declared types by affinity, which
would leave the timestamps as text and the flags as text; the scenario wants real ``timestamp``,
``date`` and ``boolean`` columns and its declared foreign keys, so it runs its own DDL and copies the
rows into it. Reading the rows back from the SQLite file, not regenerating them, guarantees that
both engines hold the same data.

The target is the URL's database, in the schema named by a ``schema=`` query parameter (as
``open_engine`` reads it), else ``public``. A named schema is dropped and recreated; in ``public``
only the scenario's own tables are replaced.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
from psycopg import sql

from reflect_sql.db.base import ConnectionFailed
from reflect_sql.db.postgres import redact, split_schema
from reflect_sql.errors import UserError
from reflect_sql.experiments.smartrestaurant.generator import SCHEMA_POSTGRES, TABLE_ORDER


def connect(pg_url: str) -> psycopg.Connection:
    """A connection to the URL's database, or ConnectionFailed with a one-line reason."""
    try:
        return psycopg.connect(split_schema(pg_url)[0], connect_timeout=10)
    except psycopg.Error as exc:
        reason = next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        raise ConnectionFailed(f"cannot connect to PostgreSQL at {redact(pg_url)}: {reason}") from None


def load_postgres(sqlite_path: str | Path, pg_url: str) -> dict[str, int]:
    """Copy every scenario table from ``sqlite_path`` into PostgreSQL; returns row counts."""
    path = Path(sqlite_path)
    if not path.is_file():
        raise UserError(f"SmartRestaurant SQLite file not found: {path}")
    schema = split_schema(pg_url)[1] or "public"
    src = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        dst = connect(pg_url)
        counts: dict[str, int] = {}
        with dst:
            with dst.transaction():
                target = sql.Identifier(schema)
                if schema == "public":
                    for table in reversed(TABLE_ORDER):
                        dst.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.Identifier(schema, table)))
                else:
                    dst.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(target))
                    dst.execute(sql.SQL("CREATE SCHEMA {}").format(target))
                dst.execute(sql.SQL("SET LOCAL search_path TO {}").format(target))
                dst.execute(SCHEMA_POSTGRES.read_text(encoding="utf-8"))
                for table in TABLE_ORDER:
                    cursor = src.execute(f"SELECT * FROM {table} ORDER BY rowid")
                    columns = [d[0] for d in cursor.description]
                    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
                        sql.Identifier(schema, table), sql.SQL(", ").join(map(sql.Identifier, columns))
                    )
                    n = 0
                    # Text COPY: PostgreSQL parses the 'YYYY-MM-DD HH:MM:SS' strings as timestamps
                    # and SQLite's 0/1 flags as booleans, exactly as it would the same literals.
                    with dst.cursor().copy(statement) as copy:
                        for row in cursor:
                            copy.write_row(row)
                            n += 1
                    counts[table] = n
            for table in TABLE_ORDER:
                dst.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))
    finally:
        src.close()
    return counts
