"""What the loops need from a knowledge base, and a KB-less stand-in that serves a whole Schema.

The loops only ever call ``retrieve(question, k, m, evidence=...)`` (plus ``renderings=`` for a question
not in English: its English rendering, to search with too) and read ``tables``,
``columns`` and ``render()`` of what comes back (plus ``examples`` when present). ``enrich`` is
optional: a retriever without it simply has nothing to learn into. So is ``extend(context,
{table: [column, ...]})``, by which schema-grounded repair adds a table retrieval missed; without
it the context stays as retrieved (the whole-schema context here already holds every table).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from reflect_sql.db.identifiers import quote_identifier
from reflect_sql.db.schema import Schema
from reflect_sql.kb.context import WHOLE_DATABASE


@runtime_checkable
class RetrievedContext(Protocol):
    tables: list[str]
    columns: list[str]  # "table.column"

    def render(self) -> str: ...


@runtime_checkable
class ContextProvider(Protocol):
    def retrieve(self, question: str, k: int, m: int, evidence: str = "") -> RetrievedContext: ...


@runtime_checkable
class Enricher(Protocol):
    def enrich(self, question: str, sql: str, result: Any, judgments: dict[str, Any]) -> Any: ...


def retrieve(provider: ContextProvider, query: str, k: int, m: int, evidence: str = "",
             renderings: tuple[str, ...] = ()) -> RetrievedContext:
    """``provider.retrieve``, with the question's renderings only when there are any: a provider that
    takes none (a whole-schema one, a test's) is only ever given them for a question not in English."""
    if renderings:
        return provider.retrieve(query, k, m, evidence=evidence or "", renderings=renderings)
    return provider.retrieve(query, k, m, evidence=evidence or "")


def render_examples(context: Any, rendered: str = "") -> str:
    """Verified question/SQL pairs carried by a context, as prompt text ("" when it has none).

    Examples whose question ``rendered`` (the context's own ``render()``) already shows are left
    out: a small model's prompt has no room for the same example twice.
    """
    lines = []
    for ex in getattr(context, "examples", None) or []:
        get = ex.get if isinstance(ex, dict) else lambda key, ex=ex: getattr(ex, key, "")
        question, sql = get("question"), get("sql")
        if not question or not sql or question in rendered:
            continue
        lines.append(f"Question: {question}")
        if get("evidence"):
            lines.append(f"Evidence: {get('evidence')}")
        lines.append(f"SQL: {sql}")
        lines.append("")
    return "\n".join(lines).strip()


def _quote(name: str) -> str:
    return quote_identifier(name, only_if_needed=True)


@dataclass
class WholeSchemaContext:
    """The whole schema as prompt context: CREATE TABLE-like, sample values as comments."""

    schema: Schema
    tables: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    examples: list[Any] = field(default_factory=list)
    pruned: str = WHOLE_DATABASE  # nothing: the retrieval judge has nothing to widen

    def render(self) -> str:
        fks_by_table: dict[str, list[str]] = {}
        for fk in self.schema.foreign_keys:
            fks_by_table.setdefault(fk.table.lower(), []).append(
                f"FOREIGN KEY ({', '.join(map(_quote, fk.columns))}) REFERENCES "
                f"{_quote(fk.ref_table)}({', '.join(map(_quote, fk.ref_columns))})"
            )
        blocks = []
        for table in self.schema.tables:
            single_pk = table.primary_key[0].lower() if len(table.primary_key) == 1 else None
            entries: list[tuple[str, str]] = []  # (definition, comment)
            for col in table.columns:
                definition = f"{_quote(col.name)} {col.type or ''}".rstrip()
                if col.name.lower() == single_pk or (col.primary_key and not table.primary_key):
                    definition += " PRIMARY KEY"
                comment = "e.g. " + ", ".join(repr(s) for s in col.samples) if col.samples else ""
                entries.append((definition, comment))
            if len(table.primary_key) > 1:
                entries.append((f"PRIMARY KEY ({', '.join(map(_quote, table.primary_key))})", ""))
            entries += [(fk, "") for fk in fks_by_table.get(table.name.lower(), [])]
            lines = []
            for i, (definition, comment) in enumerate(entries):
                sep = "," if i < len(entries) - 1 else ""
                lines.append(f"  {definition}{sep}" + (f"  -- {comment}" if comment else ""))
            header = f"CREATE TABLE {_quote(table.name)} ("
            if table.row_count is not None:
                header += f"  -- {table.row_count} rows"
            blocks.append("\n".join([header, *lines, ");"]))
        return "\n\n".join(blocks)


class SchemaRetriever:
    """Retrieval without embeddings: every table and column, whatever k and m say.

    The fallback when no KB exists, and an honest baseline on small databases where the whole
    schema fits in a prompt. It has no ``enrich``: there is nothing to learn into.
    """

    def __init__(self, schema: Schema):
        self.schema = schema

    def passes_whole_database(self) -> bool:
        return True

    def retrieve(self, question: str, k: int, m: int, evidence: str = "", renderings=()) -> WholeSchemaContext:
        return WholeSchemaContext(
            schema=self.schema,
            tables=[t.name for t in self.schema.tables],
            columns=[f"{t.name}.{c.name}" for t in self.schema.tables for c in t.columns],
        )
