"""Known-wrong SQL for the judges' labelled data: gold queries with one typical mistake injected.

Four mistakes, the ones the paper's judges are meant to catch, each an AST transform (sqlglot):

- ``wrong_join``: one side of a join condition moves to another column of the same table (same
  type first, key-like names first), e.g. ``T1.race_id = T2.id`` -> ``T1.gender_id = T2.id``.
  Needs the schema to know which columns exist; without it, not applicable.
- ``dropped_filter``: one WHERE (or HAVING) conjunct is removed, value filters first; the whole
  clause when it has a single condition.
- ``wrong_aggregation``: SUM <-> AVG, MAX <-> MIN, COUNT(DISTINCT x) -> COUNT(x), and
  COUNT(x) -> COUNT(DISTINCT x) or SUM(x).
- ``integer_division``: inside a division, casts to a floating type are removed and float
  literals (``100.0``) become integers, so the engine truncates the ratio.

Each transform yields its variants in order of preference; ``perturb`` takes the first. A
variant can return the same rows as the gold query on a given database (COUNT(DISTINCT id) counts
the same as COUNT(id)), so ``labelled.wrong_variants`` executes them and keeps only those whose
result differs: known-wrong means wrong by execution, not by assumption.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import sqlglot
from sqlglot import exp

KINDS = ("wrong_join", "dropped_filter", "wrong_aggregation", "integer_division")

_FLOAT_TYPES = {
    exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT, exp.DataType.Type.DECIMAL,
    exp.DataType.Type.BIGDECIMAL, exp.DataType.Type.UDOUBLE, exp.DataType.Type.UDECIMAL,
}
# Variants per transform: enough to find one that changes the result, few enough to execute.
MAX_VARIANTS = 6


def _parse(sql: str, dialect: str) -> exp.Expression:
    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
    except sqlglot.errors.SqlglotError as exc:
        raise ValueError(f"cannot parse SQL {sql[:80]!r}: {exc}") from None
    if len(trees) != 1:
        raise ValueError(f"expected one SQL statement, got {len(trees)}: {sql[:80]!r}")
    return trees[0]


def _mapping(schema: Any) -> dict[str, dict[str, str]]:
    if schema is None:
        return {}
    if hasattr(schema, "sqlglot_mapping"):
        schema = schema.sqlglot_mapping()
    return {str(t).lower(): {str(c): str(ty) for c, ty in cols.items()} for t, cols in schema.items()}


def _nth(tree: exp.Expression, kind: type, index: int) -> exp.Expression:
    """The ``index``-th node of ``kind`` in ``tree``: a copy has its nodes in the same order."""
    return list(tree.find_all(kind))[index]


def _keyish(name: str) -> bool:
    name = name.lower()
    return name.endswith("id") or name.endswith("_code") or name.endswith("_key")


def _wrong_join(tree: exp.Expression, schema: Any, dialect: str) -> Iterator[exp.Expression]:
    mapping = _mapping(schema)
    if not mapping:
        return
    aliases: dict[str, str] = {}
    for table in tree.find_all(exp.Table):
        aliases[table.alias_or_name.lower()] = table.name.lower()
        aliases.setdefault(table.name.lower(), table.name.lower())
    columns_in_tree = list(tree.find_all(exp.Column))
    for join in tree.find_all(exp.Join):
        on = join.args.get("on")
        if on is None:
            continue
        for eq in on.find_all(exp.EQ):
            for column in (eq.this, eq.expression):
                if not isinstance(column, exp.Column) or not isinstance(eq.this, exp.Column) \
                        or not isinstance(eq.expression, exp.Column):
                    continue
                columns = mapping.get(aliases.get(column.table.lower(), "") if column.table else "", {})
                current = column.name.lower()
                own_type = next((ty for c, ty in columns.items() if c.lower() == current), None)
                # A same-typed key column is the mistake a model makes; a text column joined to an
                # integer key would just return nothing.
                others = sorted((c for c in columns if c.lower() != current),
                                key=lambda c: (columns[c] != own_type, not _keyish(c), c.lower()))
                index = next(i for i, c in enumerate(columns_in_tree) if c is column)
                for other in others[:2]:
                    copy = tree.copy()
                    target = _nth(copy, exp.Column, index)
                    target.set("this", exp.to_identifier(other, quoted=column.this.quoted))
                    yield copy, (f"joins on {target.sql(dialect)} where the join key is {column.sql(dialect)} "
                                 f"(in `{eq.sql(dialect)}`)")


def _conjuncts(condition: exp.Expression) -> list[exp.Expression]:
    return list(condition.flatten()) if isinstance(condition, exp.And) else [condition]


def _dropped_filter(tree: exp.Expression, schema: Any, dialect: str) -> Iterator[exp.Expression]:
    selects = list(tree.find_all(exp.Select))  # the outermost first (breadth-first)
    for s_index, select in enumerate(selects):
        for clause in ("where", "having"):
            part = select.args.get(clause)
            if part is None:
                continue
            conjuncts = _conjuncts(part.this)
            # A value filter (a comparison with a literal) is the condition a model forgets.
            order = sorted(range(len(conjuncts)), key=lambda i: conjuncts[i].find(exp.Literal) is None)
            for victim in order:
                note = f"lacks the condition `{conjuncts[victim].sql(dialect)}` that the question requires"
                copy = tree.copy()
                node = _nth(copy, exp.Select, s_index)
                if len(conjuncts) == 1:
                    node.set(clause, None)
                else:
                    kept = [c for i, c in enumerate(_conjuncts(node.args[clause].this)) if i != victim]
                    wrapper = exp.Where if clause == "where" else exp.Having
                    node.set(clause, wrapper(this=exp.and_(*[k.copy() for k in kept])))
                yield copy, note


_SWAP = {exp.Sum: exp.Avg, exp.Avg: exp.Sum, exp.Max: exp.Min, exp.Min: exp.Max}


def _wrong_aggregation(tree: exp.Expression, schema: Any, dialect: str) -> Iterator[exp.Expression]:
    aggs = list(tree.find_all(exp.AggFunc))
    # Swaps between the four value aggregates first: they change the result most surely.
    for index, agg in enumerate(aggs):
        target = _SWAP.get(type(agg))
        if target is not None:
            copy = tree.copy()
            node = _nth(copy, exp.AggFunc, index)
            wrong = target(this=node.this.copy())
            node.replace(wrong)
            yield copy, f"computes {wrong.sql(dialect)} where the question needs {agg.sql(dialect)}"
    for index, agg in enumerate(aggs):
        if type(agg) is not exp.Count or agg.this is None or isinstance(agg.this, exp.Star):
            continue
        if isinstance(agg.this, exp.Distinct):
            if len(agg.this.expressions) == 1:
                copy = tree.copy()
                node = _nth(copy, exp.AggFunc, index)
                node.set("this", node.this.expressions[0].copy())
                yield copy, f"counts {node.sql(dialect)}, with duplicates, where the question needs {agg.sql(dialect)}"
            continue
        for make in (lambda a: exp.Count(this=exp.Distinct(expressions=[a])), lambda a: exp.Sum(this=a)):
            copy = tree.copy()
            node = _nth(copy, exp.AggFunc, index)
            wrong = make(node.this.copy())
            node.replace(wrong)
            yield copy, f"computes {wrong.sql(dialect)} where the question needs {agg.sql(dialect)}"


def _integer_division(tree: exp.Expression, schema: Any, dialect: str) -> Iterator[exp.Expression]:
    copy = tree.copy()
    changed = False
    for div in list(copy.find_all(exp.Div)):
        for cast in list(div.find_all(exp.Cast)):
            if cast.to.this in _FLOAT_TYPES:
                cast.replace(cast.this.copy())
                changed = True
        for literal in list(div.find_all(exp.Literal)):
            if literal.is_string or "." not in literal.this:
                continue
            try:
                value = float(literal.this)
            except ValueError:
                continue
            if value.is_integer():
                literal.replace(exp.Literal.number(int(value)))
                changed = True
    if changed:
        divisions = "; ".join(d.sql(dialect) for d in copy.find_all(exp.Div))
        yield copy, f"divides integers (`{divisions}`), which truncates the ratio; the numerator must be CAST AS REAL"


_TRANSFORMS: dict[str, Callable[[exp.Expression, Any, str], Iterator[tuple[exp.Expression, str]]]] = {
    "wrong_join": _wrong_join,
    "dropped_filter": _dropped_filter,
    "wrong_aggregation": _wrong_aggregation,
    "integer_division": _integer_division,
}


def described_variants(sql: str, kind: str, schema: Any = None, dialect: str = "sqlite") -> list[tuple[str, str]]:
    """``(perturbed_sql, what_is_wrong)`` pairs for the mistake ``kind``, most typical first; [] if it
    does not apply. The note says what a reviewer should find, for reference judgments.

    ``schema``: a ``reflect_sql.db.schema.Schema`` or a ``{table: {column: type}}`` mapping.
    Raises ValueError for SQL that is not exactly one parsable statement.
    """
    if kind not in _TRANSFORMS:
        raise ValueError(f"unknown perturbation {kind!r} (expected one of: {', '.join(KINDS)})")
    tree = _parse(sql, dialect)
    seen = {tree.sql(dialect=dialect)}
    out = []
    for variant, note in _TRANSFORMS[kind](tree, schema, dialect):
        text = variant.sql(dialect=dialect)
        if text not in seen:
            seen.add(text)
            out.append((text, note))
            if len(out) >= MAX_VARIANTS:
                break
    return out


def variants(sql: str, kind: str, schema: Any = None, dialect: str = "sqlite") -> list[str]:
    """Distinct SQL texts with the mistake ``kind`` injected, most typical first; [] if it does not apply."""
    return [text for text, _ in described_variants(sql, kind, schema, dialect)]


def perturb(sql: str, kind: str, schema: Any = None, dialect: str = "sqlite") -> str | None:
    """``sql`` with the mistake ``kind`` injected (its most typical variant), or None."""
    found = variants(sql, kind, schema, dialect)
    return found[0] if found else None


def perturbations(sql: str, schema: Any = None, dialect: str = "sqlite") -> dict[str, str]:
    """The most typical variant of every applicable mistake: ``{kind: perturbed_sql}``."""
    out = {}
    for kind in KINDS:
        wrong = perturb(sql, kind, schema, dialect)
        if wrong is not None:
            out[kind] = wrong
    return out
