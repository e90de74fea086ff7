"""reflect_sql.db: read-only SQL engines (SQLite, PostgreSQL) behind one interface, and their schema model."""
from reflect_sql.db.base import (
    ConnectionFailed,
    Engine,
    EngineError,
    PrivilegedRole,
    QueryRefused,
    QueryResult,
    QueryTimeout,
    SQLExecutionError,
    SQLSyntaxError,
)
from reflect_sql.db.connect import is_postgres_url, open_engine
from reflect_sql.db.guard import guard_sql
from reflect_sql.db.schema import Column, ForeignKey, Schema, Table

__all__ = [
    "Column",
    "ConnectionFailed",
    "Engine",
    "EngineError",
    "ForeignKey",
    "PrivilegedRole",
    "QueryRefused",
    "QueryResult",
    "QueryTimeout",
    "SQLExecutionError",
    "SQLSyntaxError",
    "Schema",
    "Table",
    "guard_sql",
    "is_postgres_url",
    "open_engine",
]
