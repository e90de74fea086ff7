"""The engine-independent half of ``introspect()``: row counts, sample values, tables.json keys.

Each engine reads its own catalogue (tables, columns, keys) and hands over a ``run`` callable that
executes SQL built here on its read-only connection; names are quoted for the schema's dialect.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

from reflect_sql.db import tables_json as tj
from reflect_sql.db.base import EngineError
from reflect_sql.db.identifiers import quote_identifier
from reflect_sql.db.schema import Schema
from reflect_sql.db.values import sample_value
from reflect_sql.errors import UserError

# Samples come from the first rows scanned, so introspecting a large table stays cheap.
SAMPLE_SCAN_ROWS = 10_000

Run = Callable[[str], list[tuple[Any, ...]]]
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def ranged(samples: list[Any]) -> bool:
    """A column whose range says something: its samples are all numbers, or all dates."""
    if not samples:
        return False
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in samples):
        return True
    return all(isinstance(v, str) and _DATE.match(v) for v in samples)


def sample_sql(dialect: str, table: str, column: str, n: int) -> str:
    """First ``n`` distinct non-null values in scan order; the same SQL runs on SQLite and PostgreSQL."""
    col, tab = quote_identifier(column, dialect), quote_identifier(table, dialect)
    return (
        f"SELECT v FROM (SELECT v, row_number() OVER () AS rn FROM "
        f"(SELECT {col} AS v FROM {tab} WHERE {col} IS NOT NULL LIMIT {SAMPLE_SCAN_ROWS}) AS scanned) AS numbered "
        f"GROUP BY v ORDER BY min(rn) LIMIT {int(n)}"
    )


def finish(
    schema: Schema,
    run: Run,
    samples_per_column: int,
    tables_json: str | Path | None = None,
    db_id: str | None = None,
) -> Schema:
    for table in schema.tables:
        try:
            table.row_count = int(run(f"SELECT count(*) FROM {quote_identifier(table.name, schema.dialect)}")[0][0])
        except EngineError:
            table.row_count = None  # a timeout on a huge table should not fail introspection
        if samples_per_column <= 0:
            continue
        for column in table.columns:
            try:
                rows = run(sample_sql(schema.dialect, table.name, column.name, samples_per_column))
            except EngineError:
                continue  # e.g. a type with no equality operator (PostgreSQL json)
            values = [sample_value(r[0]) for r in rows]
            column.samples = [v for v in values if v is not None]
            if ranged(column.samples):
                # A name such as "c14" says nothing; "numbers from 1990 to 2024" says it may be a year.
                col = quote_identifier(column.name, schema.dialect)
                try:
                    low, high = run(f"SELECT min({col}), max({col}) FROM "
                                    f"{quote_identifier(table.name, schema.dialect)}")[0]
                except EngineError:
                    continue
                column.value_range = [sample_value(low), sample_value(high)]
    if tables_json is not None:
        if not db_id:
            raise UserError("a tables.json needs the db_id of this database's entry")
        extra = tj.foreign_keys(tj.load_entry(tables_json, db_id), schema)
        schema.foreign_keys = tj.merge(schema.foreign_keys, extra)
    return schema
