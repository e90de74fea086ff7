"""Which tables and columns an SQL query uses, resolved by sqlglot's qualifier against a schema.

Used for training pairs (so a verified example says what it touches) and by the recall bench (the
gold side). Stars are left unexpanded: ``SELECT *`` needs the table, not every column.

A table the schema lacks is an error. Columns are not validated: SQLite reads a double-quoted
word that names no column as a string ("Aberdeen" in Spider's gold SQL), so an unresolved column
is left out rather than refused.
"""
from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import traverse_scope


class UsageError(ValueError):
    pass


def sql_usage(sql: str, mapping: dict[str, dict[str, str]], dialect: str = "sqlite") -> tuple[list[str], list[str]]:
    """``(tables, ["table.column", ...])`` with the schema's own spelling, sorted.

    ``mapping`` is ``{table: {column: type}}`` (``Schema.sqlglot_mapping()``).
    """
    canon_tables = {t.lower(): t for t in mapping}
    canon_cols = {(t.lower(), c.lower()): (t, c) for t, cols in mapping.items() for c in cols}
    try:
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
        if len(statements) != 1:
            raise UsageError(f"expected one statement, found {len(statements)}")
        tree = qualify(statements[0], schema=mapping, dialect=dialect, expand_stars=False,
                       validate_qualify_columns=False, quote_identifiers=False, identify=False)
        scopes = traverse_scope(tree)
    except SqlglotError as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    unknown = sorted({t.name for t in tree.find_all(exp.Table)
                      if t.name and t.name.lower() not in canon_tables and t.name.lower() not in ctes})
    if unknown:
        raise UsageError(f"unknown table(s): {', '.join(unknown)}")
    tables: set[str] = set()
    columns: set[str] = set()
    for scope in scopes:
        for source in scope.sources.values():
            if isinstance(source, exp.Table) and source.name.lower() in canon_tables:
                tables.add(canon_tables[source.name.lower()])
        for col in scope.columns:
            source = scope.sources.get(col.table)
            if isinstance(source, exp.Table):
                hit = canon_cols.get((source.name.lower(), col.name.lower()))
                if hit:
                    columns.add(f"{hit[0]}.{hit[1]}")
    return sorted(tables), sorted(columns)
