"""The schema context retrieval hands to prompts: the chosen tables and columns, the join paths
between them, the values the question mentions and similar verified examples.

``render()`` is compact and CREATE TABLE-like, with each column's meaning and a few sample values
as SQL comments, so a model reads it as a schema it already knows how to query.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from reflect_sql.db.schema import ForeignKey, find_named
from reflect_sql.kb.values import ValueMatch

DESCRIPTION_CHARS = 110
VALUE_NOTE_CHARS = 110
SAMPLES_SHOWN = 3

# What retrieval left out of a context (``SchemaContext.pruned``): nothing, only whole tables, or
# tables and then columns within the kept ones (the paper's k and m).
WHOLE_DATABASE = "none"
TABLES_ONLY = "tables"
TABLES_AND_COLUMNS = "tables and columns"
# Qwen2.5's tokenizer read whole rendered schemas at 2.9 (the restaurant's, with Vietnamese values)
# to 3.6 (BIRD's superhero) characters a token; 2.8 keeps the estimate on the safe side of the
# prompt budget without loading a tokenizer.
CHARS_PER_TOKEN = 2.8


def estimated_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


# A context's tables and columns are views of the KB's (``kb/model.py``): the ones shown, with how
# retrieval scored them and why it kept them; its joins are the KB's foreign keys among them.
@dataclass
class ContextColumn:
    name: str
    type: str = ""
    primary_key: bool = False
    references: str | None = None  # "table(column)" for a foreign key to a table in the context
    description: str = ""
    value_note: str = ""
    samples: list[Any] = field(default_factory=list)
    score: float = 0.0
    why: list[str] = field(default_factory=list)  # "key", "join", "name", "time", "value", "semantic", "example"


@dataclass
class ContextTable:
    name: str
    columns: list[ContextColumn]
    description: str = ""
    score: float = 0.0
    bridge: bool = False  # brought in only to join two retrieved tables
    total_columns: int = 0


@dataclass
class ExampleHit:
    question: str
    sql: str
    similarity: float


def fk_graph(foreign_keys: Iterable[ForeignKey], tables: Iterable[str] = ()) -> dict[str, set[str]]:
    """Tables as nodes, foreign keys as undirected edges; ``tables`` adds nodes with no key."""
    graph: dict[str, set[str]] = {t: set() for t in tables}
    for fk in foreign_keys:
        if fk.table != fk.ref_table:
            graph.setdefault(fk.table, set()).add(fk.ref_table)
            graph.setdefault(fk.ref_table, set()).add(fk.table)
    return graph


def fk_path(graph: dict[str, set[str]], sources: Iterable[str], target: str) -> list[str]:
    """Shortest FK path from any of ``sources`` to ``target`` (both ends included), or [].

    Ties go to the alphabetically first tables, so the same question always gets the same joins.
    """
    start = sorted(set(sources))
    prev: dict[str, str | None] = {s: None for s in start}
    queue = deque(start)
    while queue:
        node = queue.popleft()
        if node == target:
            path = [node]
            while prev[path[-1]] is not None:
                path.append(prev[path[-1]])
            return path[::-1]
        for nxt in sorted(graph.get(node, ())):
            if nxt not in prev:
                prev[nxt] = node
                queue.append(nxt)
    return []


def path_links(foreign_keys: Iterable[ForeignKey], path: list[str]) -> list[list[ForeignKey]]:
    """For each step of ``path`` (as ``fk_path`` returns it), the foreign keys that make it: several
    when two tables are linked more than once (an eye and a hair colour both point at ``colour``)."""
    keys = list(foreign_keys)
    return [[fk for fk in keys if {fk.table, fk.ref_table} == {a, b}] for a, b in zip(path, path[1:])]


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(value)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


@dataclass
class SchemaContext:
    question: str
    dialect: str
    k: int
    m: int
    entries: list[ContextTable]
    joins: list[ForeignKey] = field(default_factory=list)
    values: list[ValueMatch] = field(default_factory=list)
    examples: list[ExampleHit] = field(default_factory=list)
    terms: dict[str, str] = field(default_factory=dict)
    pruned: str = TABLES_AND_COLUMNS

    @property
    def tables(self) -> list[str]:
        return [t.name for t in self.entries]

    @property
    def columns(self) -> list[str]:
        return [f"{t.name}.{c.name}" for t in self.entries for c in t.columns]

    def table(self, name: str) -> ContextTable | None:
        return find_named(self.entries, name)

    def to_json(self) -> dict[str, Any]:
        return {
            "pruned": self.pruned,
            "tables": self.tables,
            "columns": self.columns,
            "values": [v.to_json() for v in self.values],
            "joins": [j.render() for j in self.joins],
            "examples": [{"question": e.question, "sql": e.sql, "similarity": round(e.similarity, 3)}
                         for e in self.examples],
        }

    def render(self) -> str:
        # Lazy, like kb/build.py: the db room (and sqlglot with it) loads only when a schema is shown.
        from reflect_sql.db.identifiers import quote_identifier

        scope = "the whole database" if self.pruned == WHOLE_DATABASE else "retrieved tables and columns"
        lines = [f"-- Schema ({self.dialect}): {scope}; column meanings and sample values as comments."]
        matched = {(v.table.lower(), v.column.lower()): v.value for v in self.values if not v.partial}
        for table in self.entries:
            head = f"CREATE TABLE {quote_identifier(table.name, self.dialect, only_if_needed=True)} ("
            notes = []
            if table.description:
                notes.append(_clip(table.description, DESCRIPTION_CHARS))
            if table.total_columns > len(table.columns):
                notes.append(f"{len(table.columns)} of {table.total_columns} columns shown")
            lines.append(head + (f" -- {'; '.join(notes)}" if notes else ""))
            for i, col in enumerate(table.columns):
                decl = f"  {quote_identifier(col.name, self.dialect, only_if_needed=True)} {col.type or 'TEXT'}"
                if col.primary_key:
                    decl += " PRIMARY KEY"
                if col.references:
                    decl += f" REFERENCES {col.references}"
                decl += "," if i < len(table.columns) - 1 else ""
                comment = []
                if col.description:
                    comment.append(_clip(col.description, DESCRIPTION_CHARS))
                if col.value_note:
                    comment.append(_clip(col.value_note, VALUE_NOTE_CHARS))
                shown = list(col.samples[:SAMPLES_SHOWN])
                hit = matched.get((table.name.lower(), col.name.lower()))
                if hit is not None:
                    shown = [hit] + [s for s in shown if s != hit][: SAMPLES_SHOWN - 1]
                if shown:
                    comment.append("e.g. " + ", ".join(_literal(_clip(str(s), 40) if isinstance(s, str) else s) for s in shown))
                lines.append(decl + (f" -- {'; '.join(comment)}" if comment else ""))
            lines.append(");")
        if self.joins:
            lines.append("-- Join paths: " + "; ".join(j.render() for j in self.joins))
        if self.values:
            shown = [(f"{v.table}.{v.column} contains '{v.span}' (folded), e.g. {_literal(_clip(v.value, 60))}"
                      if v.partial else f"{v.table}.{v.column} = {_literal(v.value)}")
                     + (f" (for '{v.alias}')" if v.alias else "") for v in self.values]
            lines.append("-- Values the question mentions: " + "; ".join(shown))
        if self.terms:
            lines.append("-- Glossary: " + "; ".join(f"{k}: {v}" for k, v in self.terms.items()))
        for ex in self.examples:
            lines.append(f"-- Verified example: {ex.question}\n--   {' '.join(ex.sql.split())}")
        return "\n".join(lines)
