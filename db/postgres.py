"""PostgreSQL engine, read-only by construction.

Layers: the sqlglot gate (``guard.py``); a session whose transactions default to READ ONLY, and an
explicit ``BEGIN READ ONLY`` around every statement (always rolled back); the extended query
protocol, which refuses several statements in one string; ``statement_timeout`` per statement, with a
client-side cancel as a backstop; and an ``EXPLAIN`` cost cap that refuses Cartesian explosions
before they run.

A READ ONLY transaction still lets a superuser call file-reading functions (``pg_read_file``,
``lo_import``): the gate denies those, and the engine refuses such a role unless told otherwise
(``privileges.py``), so a role without superuser rights is the deployment.

The schema is ``public`` unless the URL says otherwise: a ``schema=NAME`` query parameter (taken off
the URL before connecting) or libpq's own ``options=-csearch_path%3DNAME``.
"""
from __future__ import annotations

import threading
import time
from contextlib import closing
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql as pg_sql

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
from reflect_sql.db.guard import guard_sql
from reflect_sql.db.privileges import check_role
from reflect_sql.db.schema import Column, ForeignKey, Schema, Table
from reflect_sql.settings import Settings

CONNECT_TIMEOUT_S = 10
# The server's statement_timeout should fire first; the client cancels only if it does not.
_CLIENT_GRACE = 1.25
_REFUSED_STATES = {"25006", "42501"}  # read_only_sql_transaction, insufficient_privilege

_TABLES_SQL = """
SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.oid"""
_COLUMNS_SQL = """
SELECT a.attrelid, a.attname, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attrelid, a.attnum"""
_KEYS_SQL = """
SELECT con.oid, con.contype, src.relname, ref.relname, k.ord, sa.attname, ra.attname
FROM pg_constraint con
JOIN pg_class src ON src.oid = con.conrelid
JOIN pg_namespace sn ON sn.oid = src.relnamespace
LEFT JOIN pg_class ref ON ref.oid = con.confrelid
CROSS JOIN LATERAL unnest(con.conkey, CASE WHEN con.contype = 'f' THEN con.confkey ELSE con.conkey END)
    WITH ORDINALITY AS k(src_att, ref_att, ord)
JOIN pg_attribute sa ON sa.attrelid = con.conrelid AND sa.attnum = k.src_att
LEFT JOIN pg_attribute ra ON ra.attrelid = con.confrelid AND ra.attnum = k.ref_att
WHERE sn.nspname = %s AND con.contype IN ('p', 'f')
ORDER BY con.oid, k.ord"""


def split_schema(url: str) -> tuple[str, str | None]:
    """Take a ``schema=`` query parameter off a PostgreSQL URL (libpq would reject it)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema or None


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


_EXPLAIN = "EXPLAIN (FORMAT JSON) "


def _without_explain(message: str) -> str:
    """PG quotes the failing line with a caret under the error; drop our EXPLAIN prefix from both,
    so the text points into the SQL as it was written."""
    lines = message.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("LINE 1: " + _EXPLAIN):
            lines[i] = line.replace(_EXPLAIN, "", 1)
            if i + 1 < len(lines) and lines[i + 1].strip() == "^":
                lines[i + 1] = lines[i + 1][len(_EXPLAIN):]
    return "\n".join(lines)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class PostgresEngine(Engine):
    dialect = "postgres"

    def __init__(self, url: str, settings: Settings | None = None, schema: str | None = None):
        self.settings = settings or Settings()
        self.conninfo, url_schema = split_schema(url)
        self.schema = schema or url_schema
        self._shown_url = redact(url)
        self._local = threading.local()
        self._opened: list[psycopg.Connection] = []
        self._opened_lock = threading.Lock()
        self._role_checked = False
        self._connection()  # fail now on a bad URL, server, schema or privileged role

    # --- connections -------------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        except (psycopg.Error, ValueError) as exc:
            raise ConnectionFailed(f"cannot connect to PostgreSQL at {self._shown_url}: {_first_line(exc)}") from None
        try:
            conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
            if self.schema:
                conn.execute(pg_sql.SQL("SET search_path TO {}").format(pg_sql.Identifier(self.schema)))
            current = conn.execute("SELECT current_schema()").fetchone()[0]
        except psycopg.Error as exc:
            conn.close()
            raise ConnectionFailed(f"cannot set up a read-only session on {self._shown_url}: {_first_line(exc)}") from None
        if current is None:
            conn.close()
            raise ConnectionFailed(f"schema {self.schema!r} does not exist in {self._shown_url}")
        if not self._role_checked:  # one role per URL: its first connection speaks for the others
            try:
                check_role(conn, self._shown_url, self.settings.pg_allow_superuser)
            except BaseException:
                conn.close()
                raise
            self._role_checked = True
        self._local.conn = conn
        self._local.schema = current
        with self._opened_lock:
            self._opened.append(conn)
        return conn

    def close(self) -> None:
        with self._opened_lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
        self._local = threading.local()

    @property
    def current_schema(self) -> str:
        self._connection()
        return self._local.schema

    # --- running -----------------------------------------------------------------------------

    def _in_transaction(self, timeout_s: float, work: Callable[[psycopg.Cursor, float], Any]) -> Any:
        """Run ``work(cursor, deadline)`` in a fresh READ ONLY transaction, rolled back afterwards.

        A connection found broken (the server restarted) is replaced once and the work retried:
        it only reads, so running it again is harmless.
        """
        for attempt in (1, 2):
            conn = self._connection()
            deadline = time.monotonic() + timeout_s
            # Backstop for a server that does not honour statement_timeout in time.
            timer = threading.Timer(timeout_s * _CLIENT_GRACE + 0.5, conn.cancel_safe)
            timer.daemon = True
            timer.start()
            try:
                conn.execute("BEGIN READ ONLY")
                with conn.cursor() as cur:
                    return work(cur, deadline)
            except psycopg.Error as exc:
                if not (conn.closed or conn.broken):
                    raise SQLExecutionError(_first_line(exc)) from None
                self._local.conn = None
                if attempt == 2:
                    raise ConnectionFailed(f"lost the connection to {self._shown_url}: {_first_line(exc)}") from None
            finally:
                timer.cancel()
                if not conn.closed:
                    try:
                        conn.execute("ROLLBACK")
                    except psycopg.Error:
                        conn.close()

    @staticmethod
    def _fetch(cur: psycopg.Cursor, sql: str, deadline: float, params: Any = None, limit: int | None = None):
        """Rows of one statement under the time left. ``stream`` uses the extended protocol (one
        statement per string) and, when left early at ``limit``, cancels the rest of the query."""
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        cur.execute("SELECT set_config('statement_timeout', %s, true)", [f"{left_ms}ms"])
        rows: list[tuple[Any, ...]] = []
        columns: list[str] | None = None
        with closing(cur.stream(sql, params)) as stream:
            for row in stream:
                if columns is None:  # read before an early exit cancels the rest
                    columns = [d.name for d in cur.description or []]
                rows.append(row)
                if limit is not None and len(rows) >= limit:
                    break
        if columns is None:
            columns = [d.name for d in cur.description or []]
        return columns, rows

    def _error(self, exc: psycopg.Error, sql: str, compiling: bool, timeout_s: float) -> EngineError:
        message = _without_explain(str(exc).strip())
        state = getattr(exc, "sqlstate", None) or ""
        if isinstance(exc, pg_errors.QueryCanceled):
            return QueryTimeout(f"query stopped: it ran past its {timeout_s:g} s timeout", sql=sql)
        if state in _REFUSED_STATES:
            return QueryRefused(f"the read-only session denied it: {message}", sql=sql)
        if "cannot insert multiple commands" in message:
            return QueryRefused("several statements in one string; exactly one query is allowed", sql=sql)
        # Errors EXPLAIN finds are compile-time ones (syntax, unknown names, types): the synthesis
        # loop repairs those. Errors while running (division by zero, bad casts) are execution errors.
        return (SQLSyntaxError if compiling else SQLExecutionError)(message, sql=sql)

    def _fetch_as(self, cur: psycopg.Cursor, statement: str, sql: str, deadline: float, timeout_s: float,
                  compiling: bool, limit: int | None = None) -> tuple[list[str], list[tuple]]:
        """``_fetch`` with PostgreSQL's errors told as the engine's (``_error``), except a lost
        connection, which propagates for the caller's reconnect."""
        try:
            return self._fetch(cur, statement, deadline, limit=limit)
        except psycopg.OperationalError as exc:
            if cur.connection.closed or cur.connection.broken:
                raise
            raise self._error(exc, sql, compiling, timeout_s) from None
        except psycopg.Error as exc:
            raise self._error(exc, sql, compiling, timeout_s) from None

    def _explain(self, cur: psycopg.Cursor, sql: str, deadline: float, timeout_s: float) -> float:
        _, rows = self._fetch_as(cur, _EXPLAIN + sql, sql, deadline, timeout_s, compiling=True)
        return float(rows[0][0][0]["Plan"]["Total Cost"])

    def check(self, sql: str) -> str | None:
        try:
            guard_sql(sql, self.dialect)
        except SQLSyntaxError as exc:
            return exc.message
        timeout_s = self.settings.query_timeout_s

        def work(cur: psycopg.Cursor, deadline: float) -> str | None:
            try:
                self._explain(cur, sql, deadline, timeout_s)
            except (SQLSyntaxError, SQLExecutionError) as exc:
                return exc.message
            return None

        return self._in_transaction(timeout_s, work)

    def execute(self, sql: str, timeout_s: float | None = None, max_rows: int | None = None) -> QueryResult:
        timeout_s = self.settings.query_timeout_s if timeout_s is None else float(timeout_s)
        max_rows = self.settings.max_rows if max_rows is None else int(max_rows)
        if timeout_s <= 0 or max_rows < 1:
            raise ValueError(f"timeout_s must be > 0 and max_rows >= 1 (got {timeout_s}, {max_rows})")
        guard_sql(sql, self.dialect)
        cap = self.settings.pg_max_plan_cost

        def work(cur: psycopg.Cursor, deadline: float) -> QueryResult:
            start = time.perf_counter()
            cost = self._explain(cur, sql, deadline, timeout_s)
            if cost > cap:
                raise QueryRefused(
                    f"the planner estimates a cost of {cost:,.0f}, above the cap pg_max_plan_cost={cap:g}; "
                    "a join without a join condition (a Cartesian product) is the usual cause",
                    sql=sql,
                )
            columns, rows = self._fetch_as(cur, sql, sql, deadline, timeout_s, compiling=False, limit=max_rows + 1)
            truncated = len(rows) > max_rows
            return QueryResult(
                columns, rows[:max_rows], truncated, time.perf_counter() - start, extra={"plan_cost": cost}
            )

        return self._in_transaction(timeout_s, work)

    # --- introspection -----------------------------------------------------------------------

    def _read(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        def work(cur: psycopg.Cursor, deadline: float) -> list[tuple[Any, ...]]:
            try:
                return self._fetch(cur, sql, deadline, params)[1]
            except psycopg.OperationalError as exc:
                if cur.connection.closed or cur.connection.broken:
                    raise
                raise self._error(exc, sql, False, self.settings.query_timeout_s) from None
            except psycopg.Error as exc:
                raise self._error(exc, sql, False, self.settings.query_timeout_s) from None

        return self._in_transaction(self.settings.query_timeout_s, work)

    def introspect(self, tables_json: str | None = None, db_id: str | None = None) -> Schema:
        schema_name = self.current_schema
        tables: dict[int, Table] = {oid: Table(name=name, columns=[]) for oid, name in self._read(_TABLES_SQL, [schema_name])}
        for oid, name, type_, nullable in self._read(_COLUMNS_SQL, [schema_name]):
            if oid in tables:
                tables[oid].columns.append(Column(name=name, type=type_, nullable=nullable))
        keys: dict[int, list[tuple[str, str, str | None, str, str | None]]] = {}
        for con_oid, kind, src, ref, _ord, src_col, ref_col in self._read(_KEYS_SQL, [schema_name]):
            keys.setdefault(con_oid, []).append((kind, src, ref, src_col, ref_col))
        by_name = {t.name: t for t in tables.values()}
        foreign_keys = []
        for parts in keys.values():
            kind, src, ref = parts[0][0], parts[0][1], parts[0][2]
            if src not in by_name:
                continue
            if kind == "p":
                by_name[src].primary_key = [p[3] for p in parts]
                for column in by_name[src].columns:
                    column.primary_key = column.name in by_name[src].primary_key
            else:
                foreign_keys.append(ForeignKey(src, [p[3] for p in parts], ref, [p[4] for p in parts], source="declared"))
        schema = Schema(dialect=self.dialect, tables=list(tables.values()), foreign_keys=foreign_keys)
        return introspection.finish(
            schema,
            self._read,
            self.settings.sample_values_per_column,
            tables_json,
            db_id or schema_name,
        )
