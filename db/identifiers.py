"""The one way to write a table or column name into SQL text: sqlglot's own quoting for the dialect.

SQLite and PostgreSQL both delimit identifiers with double quotes and double an embedded one
(``we"ird`` -> ``"we""ird"``); sqlglot knows that, and every other dialect's rule, so nothing here
re-types it.
"""
from __future__ import annotations

from sqlglot import exp


def quote_identifier(name: str, dialect: str = "sqlite", *, only_if_needed: bool = False) -> str:
    """``name`` as a quoted identifier of ``dialect`` (a sqlglot dialect name: "sqlite", "postgres").

    ``only_if_needed`` leaves a plain name bare, for schema text shown to a language model: letters,
    digits and underscores (any script), not starting with a digit. Reserved words stay bare there
    too, as they always have; SQL that is executed quotes every name (the default).
    """
    if only_if_needed and _plain(name):
        return name
    return exp.to_identifier(name, quoted=True).sql(dialect=dialect)


def _plain(name: str) -> bool:
    return name.replace("_", "a").isalnum() and not name[:1].isdigit()
