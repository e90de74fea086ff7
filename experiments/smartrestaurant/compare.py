"""Make one query's rows from SQLite and from PostgreSQL comparable.

The engines agree on values but not on Python types: PostgreSQL returns Decimal for SUM/AVG over
integers and for ROUND(numeric), datetime for timestamps and bool for booleans, where SQLite returns
int/float, text and 0/1. Normalising maps both to one form; row order only counts when the query
itself orders its result.
"""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Iterable

import sqlglot
from sqlglot import exp

FLOAT_PLACES = 6


def normalise_value(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float, Decimal)):
        # 5 (SQLite) and Decimal('5') or 5.0 (PostgreSQL) must meet: every number becomes a float.
        return round(float(value), FLOAT_PLACES) + 0.0  # + 0.0 turns -0.0 into 0.0
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def normalise_rows(rows: Iterable[Iterable[Any]], ordered: bool) -> list[tuple]:
    out = [tuple(normalise_value(v) for v in row) for row in rows]
    # repr sorts None, numbers and text together without raising; only its consistency matters.
    return out if ordered else sorted(out, key=repr)


def is_ordered(sql: str, dialect: str = "sqlite") -> bool:
    """True when the outermost query has ORDER BY, so row order is part of the answer."""
    tree = sqlglot.parse_one(sql, read=dialect)
    return isinstance(tree, exp.Query) and tree.args.get("order") is not None


def tie_probe(sql: str, dialect: str = "sqlite") -> tuple[str, int] | None:
    """For ``... ORDER BY keys LIMIT k``: a query returning the first k+1 rows' sort keys, and k.

    If row k+1 has the same keys as row k, the LIMIT cuts through a tie and the engines may pick
    different rows: such a gold query has no single answer.
    """
    tree = sqlglot.parse_one(sql, read=dialect)
    order, limit = tree.args.get("order"), tree.args.get("limit")
    if order is None or limit is None:
        return None
    k = int(limit.expression.name)
    aliases = {p.alias: p.this for p in tree.expressions if isinstance(p, exp.Alias)}
    keys = []
    for ordered in order.expressions:
        key = ordered.this
        if isinstance(key, exp.Column) and not key.table and key.name in aliases:
            # ORDER BY an output alias: keep the alias so the ORDER BY still resolves.
            key = exp.alias_(aliases[key.name].copy(), key.name)
        keys.append(key.copy())
    probe = tree.copy()
    probe.set("expressions", keys)
    probe.set("limit", exp.Limit(expression=exp.Literal.number(k + 1)))
    return probe.sql(dialect=dialect), k
