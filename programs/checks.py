"""Deterministic result checks (beyond the paper): measured facts about an executed query that feed
E_data and the entailment judge's prompt, and that appear in the trace.

Severity "error" marks a result that cannot be the answer as it stands (the entailment loop then
sets E_data to the bottom of its scale); "warning" marks a suspicion that the judge weighs. Either
bars KB enrichment. The split is measured: on the gold SQL of the shared dev sets (BIRD 287, Spider
594, SmartRestaurant 121 questions) the error checks fire once (a BIRD gold ratio that really does
divide integers), while an empty result (40 Spider golds) or an all-NULL column (6) is a legitimate
answer often enough that forcing a rewrite would push correct queries away.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify

from reflect_sql.db.schema import Schema

# Words by which a question asks for a fraction; integer division silently truncates those.
_RATIO_WORDS = re.compile(r"\b(rate|rates|ratio|ratios|percent|percentage|percentages|proportion|fraction|share)\b|%", re.I)
_DISTINCT_WORDS = re.compile(r"\b(distinct|different|unique|without duplicates|no duplicates)\b", re.I)
# Questions whose answer is one value. A "per"/"each"/"by" breakdown asks for a row per group.
_SINGLE_VALUE = re.compile(
    r"^\s*(how many|how much|what is the (total|number|count|average|sum|maximum|minimum|highest|lowest|"
    r"percentage|ratio|rate|proportion)|what percentage|what proportion|which \w+ (has|have|had) the (most|least|highest|lowest))\b",
    re.I,
)
_BREAKDOWN = re.compile(r"\b(per|each|every|by|for all|list|respectively|group|grouped)\b", re.I)
_TOP_N = re.compile(r"\b(?:top|first|best|last|bottom)\s+(\d+)\b|\b(\d+)\s+(?:most|least|highest|lowest|largest|smallest|best|worst)\b", re.I)


# The registry of deterministic checks and their severities. KB enrichment requires every one of
# them passed (programs/verification.py takes the names from here), and check_result can only
# report a registered name, so a new check is part of that policy from the moment it exists.
CHECKS: dict[str, str] = {
    "empty_result": "warning",
    "all_null_column": "warning",
    "integer_division": "error",
    "division_by_zero": "error",
    "duplicate_rows": "error",
    "result_too_large": "warning",
    "result_truncated": "warning",
}


@dataclass(frozen=True)
class Finding:
    check: str
    severity: str  # "error" | "warning"
    message: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def _found(check: str, message: str) -> Finding:
    return Finding(check, CHECKS[check], message)


def render_findings(findings: Sequence[Finding]) -> str:
    if not findings:
        return "All deterministic checks passed."
    return "\n".join(f"- [{f.severity}] {f.check}: {f.message}" for f in findings)


def has_errors(findings: Sequence[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


def _parse(sql: str, dialect: str) -> exp.Expression | None:
    try:
        trees = sqlglot.parse(sql, dialect=dialect or None)
    except sqlglot.errors.SqlglotError:
        return None
    trees = [t for t in trees if t is not None]
    return trees[0] if len(trees) == 1 else None


def _typed(tree: exp.Expression, schema: Schema | None, dialect: str) -> exp.Expression:
    """The tree with sqlglot types on every node; column types come from the schema when they resolve."""
    mapping = schema.sqlglot_mapping() if schema else None
    try:
        tree = qualify(tree.copy(), schema=mapping, dialect=dialect or None, validate_qualify_columns=False)
        return annotate_types(tree, schema=mapping, dialect=dialect or None)
    except Exception:  # sqlglot can trip on odd schemas or SQL; literal and aggregate types still help
        try:
            return annotate_types(tree.copy(), dialect=dialect or None)
        except Exception:
            return tree


def _is_integer(node: exp.Expression) -> bool:
    t = node.type
    return t is not None and t.is_type(*exp.DataType.INTEGER_TYPES)


def integer_divisions(sql: str, schema: Schema | None, dialect: str) -> list[str]:
    """The divisions in ``sql`` whose both operands are integer-typed (so the engine truncates)."""
    tree = _parse(sql, dialect)
    if tree is None:
        return []
    typed = list(_typed(tree, schema, dialect).find_all(exp.Div))
    original = list(tree.find_all(exp.Div))
    shown = original if len(original) == len(typed) else typed  # quote the query as the model wrote it
    return [
        shown[i].sql(dialect=dialect or None)
        for i, d in enumerate(typed)
        if _is_integer(d.this) and _is_integer(d.expression)
    ]


def _division_columns(sql: str, dialect: str, n_columns: int) -> list[int]:
    """Indexes of the result columns whose outermost SELECT expression divides."""
    tree = _parse(sql, dialect)
    if tree is None:
        return []
    if not isinstance(tree, exp.Select):  # a UNION's columns come from several SELECTs
        return []
    select = tree
    projections = select.expressions
    if len(projections) != n_columns or any(isinstance(p, exp.Star) for p in projections):
        return []
    return [i for i, p in enumerate(projections) if p.find(exp.Div) is not None]


def check_result(
    question: str,
    sql: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    schema: Schema | Callable[[], Schema | None] | None = None,
    dialect: str = "sqlite",
    truncated: bool = False,
) -> list[Finding]:
    """``schema`` may be a zero-argument callable: column types are only needed for a ratio question."""
    findings: list[Finding] = []
    n = len(rows)

    if n == 0:
        findings.append(_found("empty_result", "the query returned no rows; check filter values, joins and literals"))

    for i, name in enumerate(columns):
        if n and all(r[i] is None for r in rows):
            findings.append(_found("all_null_column", f"column {name!r} is NULL in every one of the {n} rows"))

    if _RATIO_WORDS.search(question):
        for div in integer_divisions(sql, schema() if callable(schema) else schema, dialect):
            findings.append(_found(
                "integer_division",
                f"the question asks for a rate/ratio/percentage but `{div}` divides two integers, which "
                "truncates the result; CAST the numerator AS REAL (or multiply by 1.0) before dividing",
            ))

    for i in _division_columns(sql, dialect, len(columns)):
        nulls = sum(1 for r in rows if r[i] is None)
        if nulls:
            findings.append(_found(
                "division_by_zero",
                f"column {columns[i]!r} is a division and is NULL in {nulls} of {n} rows: a zero (or NULL) "
                "denominator; keep only rows whose denominator is > 0",
            ))

    if n > 1 and _DISTINCT_WORDS.search(question):
        distinct = len({tuple(r) for r in rows})
        if distinct < n:
            findings.append(_found(
                "duplicate_rows",
                f"the question asks for distinct values but {n - distinct} of the {n} rows are duplicates; use DISTINCT or GROUP BY",
            ))

    expected = _expected_rows(question)
    if expected is not None and n > expected:
        findings.append(_found(
            "result_too_large",
            f"the question implies at most {expected} row(s) but the result has {n}{' (truncated)' if truncated else ''}; "
            "check aggregation, GROUP BY and LIMIT",
        ))
    elif truncated:
        findings.append(_found("result_truncated", f"the result was cut at {n} rows; the question may need aggregation or a filter"))
    return findings


def execution_findings(error_message: str) -> list[Finding]:
    """Findings an engine error implies; PostgreSQL raises on x/0 where SQLite returns NULL."""
    if "division by zero" in error_message.lower():
        return [_found("division_by_zero", "the query divided by zero; keep only rows whose denominator is > 0")]
    return []


def _expected_rows(question: str) -> int | None:
    """How many rows the wording implies, when it implies a number at all."""
    top = _TOP_N.search(question)
    if top:
        return int(top.group(1) or top.group(2))
    if _SINGLE_VALUE.search(question) and not _BREAKDOWN.search(question):
        return 1
    return None
