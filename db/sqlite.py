"""SQLite engine, read-only by construction.

Layers, each enough on its own to stop a write: the sqlglot gate (``guard.py``); a ``mode=ro`` URI
(the file is opened read-only and never created); ``PRAGMA query_only``; an authorizer that denies
every action but reading, selecting, calling allowed functions and recursive CTEs; no attached
databases. A progress handler enforces the timeout inside SQLite's VM, so even a runaway cross join
stops. Connections are per thread: evaluation runs queries on a thread pool.
"""
from __future__ import annotations

import math
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from reflect_sql.db import introspection
from reflect_sql.db.base import (
    ConnectionFailed,
    Engine,
    EngineError,
    QueryRefused,
    QueryResult,
    QueryTimeout,
    SQLExecutionError,
    SQLSyntaxError,
)
from reflect_sql.db.guard import denied_function, guard_sql
from reflect_sql.db.identifiers import quote_identifier
from reflect_sql.db.schema import Column, ForeignKey, Schema, Table
from reflect_sql.settings import Settings

# VM instructions between two looks at the clock: ~tens of microseconds of work.
_PROGRESS_STEPS = 1000
_ALLOWED_ACTIONS = {sqlite3.SQLITE_READ, sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE}
# Catalogue pragmas introspection reads; all are read-only. Every other pragma is denied.
_READ_PRAGMAS = {"table_info", "table_xinfo", "foreign_key_list", "index_list", "index_info"}
_REFUSAL_MARKERS = ("not authorized", "readonly database", "read-only", "query_only")


def _authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _source: str | None) -> int:
    if action in _ALLOWED_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if denied_function(arg2 or "") else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in _READ_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _decode(raw: bytes) -> str:
    # Benchmark databases hold the odd invalid UTF-8 byte; one bad value must not fail a whole query.
    return raw.decode("utf-8", errors="replace")


class _Clock:
    """The running statement's deadline, read by the progress handler."""

    def __init__(self) -> None:
        self.deadline = math.inf
        self.expired = False

    def tick(self) -> int:
        if time.monotonic() > self.deadline:
            self.expired = True
            return 1  # non-zero interrupts the statement
        return 0

    def interrupt(self, conn: sqlite3.Connection) -> None:
        if time.monotonic() > self.deadline:
            self.expired = True
            conn.interrupt()


class SQLiteEngine(Engine):
    dialect = "sqlite"

    def __init__(self, path: str | Path, settings: Settings | None = None):
        self.settings = settings or Settings()
        self.path = Path(path)
        if not self.path.exists():
            raise ConnectionFailed(f"SQLite database not found: {self.path}")
        if not self.path.is_file():
            raise ConnectionFailed(f"not a SQLite database file: {self.path}")
        # as_uri() percent-encodes '?', '#' and spaces, so any path survives the URI form.
        self._uri = self.path.resolve().as_uri() + "?mode=ro"
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._opened_lock = threading.Lock()
        self._connection()  # fail now, not at the first query, on a file that is not a database

    # --- connections -------------------------------------------------------------------------

    def _connection(self) -> tuple[sqlite3.Connection, _Clock]:
        held = getattr(self._local, "held", None)
        if held is not None:
            return held
        try:
            conn = sqlite3.connect(self._uri, uri=True, isolation_level=None, check_same_thread=False,
                                   timeout=self.settings.sqlite_busy_timeout_s)
        except sqlite3.Error as exc:
            raise ConnectionFailed(f"cannot open SQLite database {self.path} read-only: {exc}") from None
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise ConnectionFailed(f"{self.path} is not a readable SQLite database: {exc}") from None
        conn.text_factory = _decode
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, self.settings.max_value_bytes)
        # Installed last: the setup statements above are the only ones that skip it.
        conn.set_authorizer(_authorize)
        clock = _Clock()
        conn.set_progress_handler(clock.tick, _PROGRESS_STEPS)
        self._local.held = (conn, clock)
        with self._opened_lock:
            self._opened.append(conn)
        return conn, clock

    def close(self) -> None:
        with self._opened_lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
        self._local = threading.local()

    # --- running -----------------------------------------------------------------------------

    def _run(self, sql: str, timeout_s: float, max_rows: int | None) -> tuple[list[str], list[tuple[Any, ...]], bool]:
        conn, clock = self._connection()
        clock.expired = False
        clock.deadline = time.monotonic() + timeout_s
        # The progress handler sees the clock only between VM steps, and one step can take seconds
        # (randomblob(1e8) per row): a timer interrupts such a statement at its deadline as well.
        timer = threading.Timer(timeout_s, clock.interrupt, args=(conn,))
        timer.daemon = True
        timer.start()
        try:
            cur = conn.execute(sql)
            columns = [d[0] for d in cur.description or []]
            if max_rows is None:
                rows = cur.fetchall()
            else:
                rows = cur.fetchmany(max_rows + 1)
            cur.close()
        except (sqlite3.Error, sqlite3.Warning) as exc:
            raise self._classify(exc, sql, clock, timeout_s) from None
        finally:
            timer.cancel()
            clock.deadline = math.inf
        truncated = max_rows is not None and len(rows) > max_rows
        return columns, rows[:max_rows] if truncated else rows, truncated

    def _compile_error(self, sql: str) -> str | None:
        conn, clock = self._connection()
        clock.expired = False
        clock.deadline = time.monotonic() + self.settings.query_timeout_s
        try:
            conn.execute("EXPLAIN " + sql).close()
            return None
        except (sqlite3.Error, sqlite3.Warning) as exc:
            return str(exc)
        finally:
            clock.deadline = math.inf

    def _classify(self, exc: Exception, sql: str, clock: _Clock, timeout_s: float) -> EngineError:
        message = str(exc)
        if clock.expired:
            return QueryTimeout(f"query stopped: it ran past its {timeout_s:g} s timeout", sql=sql)
        if any(marker in message.lower() for marker in _REFUSAL_MARKERS):
            return QueryRefused(f"the read-only connection denied it: {message}", sql=sql)
        if isinstance(exc, (sqlite3.ProgrammingError, sqlite3.Warning)):  # e.g. several statements
            return QueryRefused(message, sql=sql)
        # What fails to compile is a syntax-kind error (the synthesis loop repairs those); what
        # compiles but fails while running is an execution error.
        if self._compile_error(sql) is not None:
            return SQLSyntaxError(message, sql=sql)
        return SQLExecutionError(message, sql=sql)

    def check(self, sql: str) -> str | None:
        try:
            guard_sql(sql, self.dialect)
        except SQLSyntaxError as exc:
            return exc.message
        error = self._compile_error(sql)
        if error and any(marker in error.lower() for marker in _REFUSAL_MARKERS):
            raise QueryRefused(f"the read-only connection denied it: {error}", sql=sql)
        return error

    def execute(self, sql: str, timeout_s: float | None = None, max_rows: int | None = None) -> QueryResult:
        timeout_s = self.settings.query_timeout_s if timeout_s is None else float(timeout_s)
        max_rows = self.settings.max_rows if max_rows is None else int(max_rows)
        if timeout_s <= 0 or max_rows < 1:
            raise ValueError(f"timeout_s must be > 0 and max_rows >= 1 (got {timeout_s}, {max_rows})")
        guard_sql(sql, self.dialect)
        start = time.perf_counter()
        columns, rows, truncated = self._run(sql, timeout_s, max_rows)
        return QueryResult(columns, rows, truncated, time.perf_counter() - start)

    # --- introspection -----------------------------------------------------------------------

    def _read(self, sql: str) -> list[tuple[Any, ...]]:
        return self._run(sql, self.settings.query_timeout_s, None)[1]

    def introspect(self, tables_json: str | None = None, db_id: str | None = None) -> Schema:
        names = [
            r[0]
            for r in self._read(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' "
                "ORDER BY rowid"
            )
        ]
        tables: list[Table] = []
        raw_keys: list[tuple[str, list[tuple[int, int, str, str, str | None]]]] = []
        for name in names:
            info = self._read(f"PRAGMA table_info({quote_identifier(name, self.dialect)})")
            # table_info's pk field is the column's 1-based position in the primary key, 0 if none.
            pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
            columns = [
                Column(name=r[1], type=r[2] or "", nullable=not r[3], primary_key=bool(r[5])) for r in info
            ]
            tables.append(Table(name=name, columns=columns, primary_key=pk))
            raw_keys.append((name, [(r[0], r[1], r[2], r[3], r[4]) for r in self._read(f"PRAGMA foreign_key_list({quote_identifier(name, self.dialect)})")]))
        schema = Schema(dialect=self.dialect, tables=tables)
        schema.foreign_keys = _declared_keys(schema, raw_keys)
        return introspection.finish(
            schema,
            self._read,
            self.settings.sample_values_per_column,
            tables_json,
            db_id or self.path.stem,
        )


def _declared_keys(schema: Schema, raw: list[tuple[str, list[tuple[int, int, str, str, str | None]]]]) -> list[ForeignKey]:
    """PRAGMA foreign_key_list rows grouped per key. A key may omit its target columns (``to`` is
    NULL), which SQL defines as the referenced table's primary key; BIRD files do this often."""
    keys = []
    for table, rows in raw:
        by_id: dict[int, list[tuple[int, str, str, str | None]]] = {}
        for key_id, seq, ref_table, from_col, to_col in rows:
            by_id.setdefault(key_id, []).append((seq, ref_table, from_col, to_col))
        for parts in by_id.values():
            parts.sort()
            ref = schema.table(parts[0][1])
            ref_name = ref.name if ref else parts[0][1]
            from_cols = [p[2] for p in parts]
            to_cols = [p[3] for p in parts]
            if any(c is None for c in to_cols):
                if ref is None or len(ref.primary_key) != len(from_cols):
                    continue  # cannot tell which columns it references
                to_cols = list(ref.primary_key)
            elif ref is not None:
                to_cols = [(ref.column(c).name if ref.column(c) else c) for c in to_cols]
            keys.append(ForeignKey(table, from_cols, ref_name, to_cols, source="declared"))
    return keys
