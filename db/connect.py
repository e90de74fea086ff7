"""One entry point from a ``--db`` value to an engine: a PostgreSQL URL or a SQLite file path."""
from __future__ import annotations

from pathlib import Path

from reflect_sql.db.base import ConnectionFailed, Engine
from reflect_sql.settings import Settings

PG_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(db: str) -> bool:
    return str(db).lower().startswith(PG_SCHEMES)


def open_engine(db: str | Path, settings: Settings | None = None) -> Engine:
    """``postgresql://user@host:port/dbname[?schema=NAME]`` opens PostgreSQL (the schema defaults to
    the search_path, normally ``public``); anything else must be an existing SQLite file."""
    if is_postgres_url(str(db)):
        from reflect_sql.db.postgres import PostgresEngine  # psycopg only when needed

        return PostgresEngine(str(db), settings)
    path = Path(db)
    if not path.is_file():
        what = "is a directory, not a SQLite file" if path.is_dir() else "does not exist"
        raise ConnectionFailed(f"database {path} {what} (give a SQLite file path or a postgresql:// URL)")
    from reflect_sql.db.sqlite import SQLiteEngine  # its sqlglot gate loads with the first engine, not with db

    return SQLiteEngine(path, settings)
