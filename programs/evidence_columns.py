"""Evidence-grounded check (beyond the paper): the SQL must use a column the evidence maps a phrase to.

BIRD-style evidence defines the question's terms against the schema, one clause each, as in
"superpowers refers to power_name; 3-D Man refers to superhero_name = '3-D Man'". A query that uses
none of the columns a clause names has ignored that definition. The check is deterministic and
costs no LM call, so the synthesis loop runs it before the semantic judge, which scores at chance
on the embedded models (``experiments/results/judge_scale.md``), and sends the unused clauses back
to the generator.

Measured on gold SQL, the rule's false alarms are rare: 3 of 349 such clauses of the shared BIRD dev
set (287 questions) and 3 of 120 of the SmartRestaurant questions name a column the gold query does
not use (``experiments/results/evidence_columns.md``). Columns compare by name, whatever table
the query reads them from, so a clause is satisfied leniently.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from reflect_sql.db.schema import Schema

_CLAUSE_SPLIT = re.compile(r"[;\n]")
_REFERS = re.compile(r"\brefer(?:s|red)?\s+to\b", re.I)
# Quoted text in evidence is a value ('Neutral', "Agility"), except in backticks, which quote a name.
_LITERAL = re.compile(r"'[^']*'|\"[^\"]*\"")
_NAME = re.compile(r"`([^`]+)`|\b([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?)\b")


@dataclass(frozen=True)
class UnusedClause:
    clause: str  # the evidence clause as written
    columns: tuple[str, ...]  # the columns it names, none of which the SQL uses

    def render(self) -> str:
        return f'"{self.clause}" names {", ".join(self.columns)}'


def _owners(schema: Schema) -> dict[str, set[str]]:
    """Each column name of ``schema`` (lower case) with the tables that have it."""
    owners: dict[str, set[str]] = {}
    for table in schema.tables:
        for column in table.columns:
            owners.setdefault(column.name.lower(), set()).add(table.name.lower())
    return owners


def clause_columns(definition: str, owners: dict[str, set[str]], tables: set[str]) -> tuple[str, ...]:
    """The columns (of ``owners``) named in the part of a clause after "refers to", in order, lower case."""
    found: list[str] = []
    for match in _NAME.finditer(_LITERAL.sub(" ", definition)):
        name = (match.group(1) or match.group(2)).lower()
        if name not in owners and "." in name:
            table, name = name.split(".", 1)  # table.column, or an alias.column: the column decides
            if table in tables and table not in owners.get(name, ()):
                continue
        if name in owners and name not in found:
            found.append(name)
    return tuple(found)


def evidence_clauses(evidence: str, schema: Schema) -> list[tuple[str, tuple[str, ...]]]:
    """Each "X refers to Y" clause of ``evidence`` that names at least one column of ``schema``."""
    owners = _owners(schema)
    tables = {table.name.lower() for table in schema.tables}
    clauses = []
    for part in _CLAUSE_SPLIT.split(evidence or ""):
        refers = _REFERS.search(part)
        if refers is None:
            continue
        columns = clause_columns(part[refers.end():], owners, tables)
        if columns:
            clauses.append((part.strip(), columns))
    return clauses


def used_columns(sql: str, dialect: str) -> set[str] | None:
    """Column names the SQL references anywhere, lower case; None if it does not parse."""
    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.SqlglotError:
        return None
    return {column.name.lower() for column in tree.find_all(exp.Column)}


def unused_clauses(sql: str, evidence: str, schema: Schema, dialect: str) -> list[UnusedClause]:
    """The evidence clauses none of whose columns ``sql`` uses ([] when it uses them all, or when the
    SQL does not parse: the compile step owns that)."""
    used = used_columns(sql, dialect)
    if used is None:
        return []
    return [UnusedClause(clause, columns) for clause, columns in evidence_clauses(evidence, schema)
            if not used.intersection(columns)]


def feedback(sql: str, unused: list[UnusedClause]) -> str:
    lines = ["The previous SQL ignores the evidence: it uses none of the columns these definitions name.", sql]
    lines += [f"- {clause.render()}" for clause in unused]
    lines.append("Write the query again so that it uses each definition.")
    return "\n".join(lines)
