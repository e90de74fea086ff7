"""reflect_sql.db: read-only SQL engines (SQLite, PostgreSQL) behind one interface, and their schema model.

Each name is imported from its module on first use (PEP 562), so that reading the schema model
(``reflect_sql.db.schema``, which the KB's document extends) does not load sqlglot and the engines.
"""
from __future__ import annotations

import importlib
from typing import Any

_MODULE_OF = {
    "ConnectionFailed": "base", "Engine": "base", "EngineError": "base", "PrivilegedRole": "base", "QueryRefused": "base",
    "QueryResult": "base", "QueryTimeout": "base", "SQLExecutionError": "base", "SQLSyntaxError": "base",
    "is_postgres_url": "connect", "open_engine": "connect",
    "guard_sql": "guard",
    "Column": "schema", "ForeignKey": "schema", "Schema": "schema", "Table": "schema",
}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value
