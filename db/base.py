"""The Engine interface: introspect, check (compile without running), execute (read-only).

Concrete engines (``sqlite.py``, ``postgres.py``) sit over this base, one engine per file, the way
sqlglot keeps one dialect per file. Every statement passes the sqlglot AST gate (``guard.py``)
before it reaches a connection, and each engine is read-only at the connection as well.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

from reflect_sql.db.schema import Schema
from reflect_sql.errors import UserError


class EngineError(Exception):
    """Base of every failure an engine reports; ``kind`` is stable for traces and metrics."""

    kind = "error"

    def __init__(self, message: str, sql: str | None = None):
        super().__init__(message)
        self.message = message
        self.sql = sql


class SQLSyntaxError(EngineError):
    kind = "syntax"


class SQLExecutionError(EngineError):
    kind = "execution"


class QueryTimeout(EngineError):
    kind = "timeout"


class QueryRefused(EngineError):
    """The statement is not a single read-only query, or would be too costly; the message says why."""

    kind = "refused"


class ConnectionFailed(EngineError):
    """The database is missing or unreachable."""

    kind = "connection"


class PrivilegedRole(ConnectionFailed, UserError):
    """The connection's role may reach past the database (a PostgreSQL superuser reads server files
    inside a READ ONLY transaction). A UserError: every question would meet it, so it ends a run."""

    kind = "privileged"


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False
    elapsed_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"columns": self.columns, "rows": [list(r) for r in self.rows]}


class Engine(abc.ABC):
    """A read-only handle on one database."""

    #: sqlglot dialect name
    dialect: str = ""

    @abc.abstractmethod
    def introspect(self, tables_json: str | None = None, db_id: str | None = None) -> Schema:
        """Tables, columns, types, PK/FK (declared, plus a Spider/BIRD tables.json's), row counts, samples."""

    @abc.abstractmethod
    def check(self, sql: str) -> str | None:
        """Compile without running. Returns None when it compiles, else the engine's own error text.

        A statement the guard refuses raises QueryRefused rather than returning text: it must never
        be "repaired" into running.
        """

    @abc.abstractmethod
    def execute(self, sql: str, timeout_s: float | None = None, max_rows: int | None = None) -> QueryResult:
        """Run one guarded read-only query. Raises SQLSyntaxError, SQLExecutionError, QueryTimeout, QueryRefused."""

    def close(self) -> None:  # pragma: no cover - default no-op
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
