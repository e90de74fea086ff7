"""The JSON knowledge-base document: the source of truth for one database.

It is the database's schema (``db/schema.py``'s types) with what the KB knows besides: names in
words, descriptions, aliases, verified examples and a glossary.

Everything else in a KB directory (chroma collections, the value index) is derived from it and can
be rebuilt. The document is human-readable, and every change makes a new numbered version
(``versions.py``), so enrichment can be listed and rolled back.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from reflect_sql.db.schema import Column, ForeignKey, Schema, Table

FORMAT = 1


@dataclass
class ColumnEntry(Column):
    type: str = ""
    natural_name: str = ""
    description: str = ""
    # Where ``description`` came from: "csv", "llm", "enrichment" or "" (none).
    description_source: str = ""
    value_description: str = ""
    data_format: str = ""
    # alias -> the stored value it means ("bubble tea" -> "Trà sữa nướng"), learnt by enrichment.
    aliases: dict[str, str] = field(default_factory=dict)


@dataclass
class TableEntry(Table):
    columns: list[ColumnEntry]
    natural_name: str = ""
    description: str = ""


@dataclass
class Example:
    """A question with SQL known to answer it, and what the SQL touches."""

    question: str
    sql: str
    evidence: str = ""
    tables: list[str] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    # "train" (given at build) or "enrichment" (verified by the pipeline).
    source: str = "train"


@dataclass
class KnowledgeBase(Schema):
    tables: list[TableEntry]
    database: str = field(kw_only=True)  # the DB string it was built from, so `ask` can reuse the KB
    examples: list[Example] = field(default_factory=list)
    terms: dict[str, str] = field(default_factory=dict)
    # The glossary's aliases (alias -> value); the value index finds the columns holding each value.
    aliases: dict[str, str] = field(default_factory=dict)
    version: int = 0
    format: int = FORMAT

    def column(self, table: str, column: str) -> ColumnEntry | None:
        entry = self.table(table)
        return entry.column(column) if entry else None

    def content(self) -> dict[str, Any]:
        """Everything but the version number: two versions with equal content are the same KB."""
        data = asdict(self)
        data.pop("version")
        return data

    def content_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.content(), sort_keys=True, default=str).encode()).hexdigest()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "KnowledgeBase":
        def build(kind, item):
            known = {f.name for f in fields(kind)}
            return kind(**{k: v for k, v in item.items() if k in known})

        tables = []
        for t in data.get("tables", []):
            t = dict(t)
            t["columns"] = [build(ColumnEntry, c) for c in t.get("columns", [])]
            tables.append(build(TableEntry, t))
        return cls(
            database=data["database"],
            dialect=data["dialect"],
            tables=tables,
            foreign_keys=[build(ForeignKey, fk) for fk in data.get("foreign_keys", [])],
            examples=[build(Example, e) for e in data.get("examples", [])],
            terms=dict(data.get("terms", {})),
            aliases=dict(data.get("aliases", {})),
            version=int(data.get("version", 0)),
            format=int(data.get("format", FORMAT)),
        )
