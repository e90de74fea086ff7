"""The sqlglot AST gate every statement passes before it reaches a connection.

It admits exactly one read-only query: the root is a SELECT, a set operation (UNION, INTERSECT,
EXCEPT) or a parenthesised query, CTEs ride on it, and no node anywhere in the tree writes, changes
the session, takes locks or calls a denied function. Decisions are made on the parsed tree, never
on keywords in the text, so a ``DROP`` inside a string literal or comment is harmless and a
``DELETE ... RETURNING`` inside a CTE is caught.

The gate is the first of several layers: each engine is also read-only at the connection, so a
statement the gate misjudges still cannot write.
"""
from __future__ import annotations

import logging

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from reflect_sql.db.base import QueryRefused, SQLSyntaxError

# Node types that write, change the schema or the session, or leave the SQL world. Each maps to the
# reason a refusal gives.
_FORBIDDEN_NODES: dict[type[exp.Expression], str] = {
    exp.Insert: "INSERT writes data",
    exp.Update: "UPDATE writes data",
    exp.Delete: "DELETE writes data",
    exp.Merge: "MERGE writes data",
    exp.Copy: "COPY reads or writes files and programs",
    exp.Create: "CREATE changes the schema",
    exp.Drop: "DROP changes the schema",
    exp.Alter: "ALTER changes the schema",
    exp.TruncateTable: "TRUNCATE deletes data",
    exp.Into: "SELECT INTO creates a table",
    exp.Lock: "FOR UPDATE/FOR SHARE takes row locks",
    exp.Command: "this statement type is not a query",
    exp.Pragma: "PRAGMA can change database settings",
    exp.Attach: "ATTACH opens another database",
    exp.Detach: "DETACH changes attached databases",
    exp.Set: "SET changes session settings",
    exp.Transaction: "transaction control is not allowed",
    exp.Commit: "transaction control is not allowed",
    exp.Rollback: "transaction control is not allowed",
    exp.Grant: "GRANT changes privileges",
    exp.Revoke: "REVOKE changes privileges",
    exp.Use: "USE changes the session's database",
    exp.LoadData: "LOAD DATA writes data",
    exp.Analyze: "ANALYZE writes statistics",
    exp.Comment: "COMMENT ON changes the catalogue",
    exp.Kill: "KILL ends other sessions",
    exp.Cache: "CACHE changes server state",
    exp.Uncache: "UNCACHE changes server state",
    exp.Refresh: "REFRESH changes server state",
    exp.Execute: "EXECUTE runs a stored statement",
    exp.Declare: "DECLARE changes the session",
    exp.Export: "EXPORT writes files",
}

# Functions with side effects outside a read-only transaction's protection: files, other sessions
# and servers, sleeping, locks, settings, sequences, large objects, and functions that run a query
# given as a string (which the gate cannot inspect).
_DENIED_FUNCTIONS = frozenset(
    {
        # SQLite
        "load_extension", "readfile", "writefile", "edit", "fts3_tokenizer",
        # PostgreSQL: files and the server
        "pg_read_file", "pg_read_binary_file", "pg_ls_dir", "pg_stat_file", "pg_reload_conf",
        "pg_rotate_logfile", "pg_terminate_backend", "pg_cancel_backend", "pg_promote",
        "pg_log_backend_memory_contexts", "pg_notify", "pg_import_system_collations",
        "pg_current_logfile",
        # PostgreSQL: settings, sequences, transactions
        "set_config", "nextval", "setval", "currval", "lastval",
        # PostgreSQL: functions that execute a query passed as text
        "query_to_xml", "query_to_xmlschema", "query_to_xml_and_xmlschema", "cursor_to_xml",
        "cursor_to_xmlschema", "ts_stat",
    }
)
_DENIED_PREFIXES = (
    "pg_sleep", "lo_", "dblink", "pg_advisory", "pg_try_advisory", "txid_", "pg_ls_", "pg_file_",
    "pg_create_", "pg_drop_", "pg_replication_", "pg_stat_reset", "pg_switch_", "pg_wal_",
    "pg_backup_", "pg_start_backup", "pg_stop_backup", "pg_logical_", "pg_copy_",
)

_FORBIDDEN_TYPES = tuple(_FORBIDDEN_NODES)
_QUERY_ROOTS = (exp.Select, exp.SetOperation, exp.Subquery)
# Dialects tried when the engine's own cannot parse a statement, to recognise hostile statements
# written for another engine.
_FALLBACK_DIALECTS = ("sqlite", "postgres", "mysql", "tsql")


class _DropCommandFallbackWarning(logging.Filter):
    """sqlglot warns when it falls back to parsing a statement as a Command; the gate refuses every
    Command with its own reason, so that warning is noise (and would break one-line CLI errors)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_DropCommandFallbackWarning())


def _refuse(reason: str, sql: str) -> QueryRefused:
    return QueryRefused(reason, sql=sql)


def _statement_reason(node: exp.Expression) -> str:
    if isinstance(node, exp.Command):  # sqlglot keeps the unparsed statement's keyword in `this`
        return f"{str(node.this).upper()} is not allowed: only read-only SELECT queries run"
    reason = next((r for t, r in _FORBIDDEN_NODES.items() if isinstance(node, t)), None)
    return reason or f"only SELECT queries are allowed (this parses as {node.key.upper()})"


def function_name(node: exp.Func) -> str:
    """The name a function is called by: an unknown function's own name, else sqlglot's SQL name."""
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    return node.sql_name().lower()


def denied_function(name: str) -> bool:
    name = name.lower()
    return name in _DENIED_FUNCTIONS or name.startswith(_DENIED_PREFIXES)


def guard_sql(sql: str, dialect: str) -> exp.Expression:
    """Parse ``sql`` and return its tree if it is one read-only query; raise QueryRefused if not.

    Text sqlglot cannot parse raises SQLSyntaxError: it is malformed rather than hostile, and the
    synthesis loop may repair it. Unless another dialect parses it as a statement the gate would
    refuse (``LOCK`` or ``DO`` sent to SQLite, ``PRAGMA`` or ``ATTACH`` sent to PostgreSQL): that
    is refused, so hostile text is never handed back for "repair".
    """
    if not isinstance(sql, str):
        raise SQLSyntaxError(f"SQL must be a string, not {type(sql).__name__}")
    try:
        sql.encode("utf-8")
    except UnicodeEncodeError as exc:  # e.g. a lone surrogate from a model's JSON escape
        raise SQLSyntaxError(f"the SQL is not valid Unicode text: {exc.reason} at position {exc.start}", sql=sql) from None
    try:
        statements = _parse(sql, dialect)
    except (ParseError, TokenError) as exc:
        for other in _FALLBACK_DIALECTS:
            if other == dialect:
                continue
            try:
                _inspect(_parse(sql, other), sql)
            except (ParseError, TokenError, SQLSyntaxError, RecursionError):
                continue
            except QueryRefused as refusal:
                raise QueryRefused(f"{refusal.message} (read as {other} SQL)", sql=sql) from None
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise SQLSyntaxError(f"cannot parse SQL: {first_line}", sql=sql) from None
    except RecursionError:
        # What cannot be checked does not run.
        raise QueryRefused("the SQL is nested too deeply to be checked", sql=sql) from None
    return _inspect(statements, sql)


def _parse(sql: str, dialect: str) -> list[exp.Expression]:
    # A comment after the last semicolon comes back as a bare Semicolon node: not a statement.
    return [s for s in sqlglot.parse(sql, read=dialect) if s is not None and not isinstance(s, exp.Semicolon)]


def _inspect(statements: list[exp.Expression], sql: str) -> exp.Expression:
    if not statements:
        raise SQLSyntaxError("empty SQL: no statement found", sql=sql)
    if len(statements) > 1:
        raise _refuse(f"{len(statements)} statements found; exactly one query is allowed", sql)
    tree = statements[0]

    if not isinstance(tree, _QUERY_ROOTS) or (isinstance(tree, exp.Subquery) and not isinstance(tree.unnest(), exp.Query)):
        raise _refuse(_statement_reason(tree), sql)

    for node in tree.walk():
        if isinstance(node, _FORBIDDEN_TYPES):
            raise _refuse(f"{_statement_reason(node)} (found inside the query)", sql)
        if isinstance(node, exp.Func):
            name = function_name(node)
            if denied_function(name):
                raise _refuse(f"function {name}() is denied: it has effects outside a read-only query", sql)
    return tree
