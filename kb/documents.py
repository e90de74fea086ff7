"""The text each KB entry is embedded as: tables (global), columns (local, per table), examples.

Kept short: all-MiniLM-L6-v2 reads 256 word pieces and ignores the rest, so the words that carry
meaning (names, descriptions) come first and sample values last.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from reflect_sql.kb.model import ColumnEntry, Example, KnowledgeBase, TableEntry
from reflect_sql.kb.text import split_identifier

MAX_SAMPLES = 5
MAX_SAMPLE_CHARS = 40
# A column whose name is this short, or holds a digit, says nothing by itself ("c14", "lsoa"):
# the table's document glosses it with the first words of its description.
CRYPTIC_NAME_CHARS = 4
GLOSS_WORDS = 8


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    metadata: dict

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()[:16]


def readable(name: str) -> str:
    return " ".join(split_identifier(name)) or name


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if not text or text.endswith((".", "!", "?")) else text + "."


def table_label(table: TableEntry) -> str:
    natural = table.natural_name.strip()
    readable_name = readable(table.name)
    return natural if natural and natural.lower() != readable_name.lower() else readable_name


def column_label(column: ColumnEntry) -> str:
    natural = column.natural_name.strip()
    readable_name = readable(column.name)
    if natural and natural.lower() != readable_name.lower():
        return f"{natural} ({readable_name})"
    return readable_name


def _samples(column: ColumnEntry) -> str:
    shown = []
    for value in column.samples[:MAX_SAMPLES]:
        text = str(value)
        shown.append(text if len(text) <= MAX_SAMPLE_CHARS else text[:MAX_SAMPLE_CHARS] + "…")
    return ", ".join(shown)


def _range(column: ColumnEntry) -> str:
    if len(column.value_range) != 2 or None in column.value_range:
        return ""
    low, high = column.value_range
    kind = "Numbers" if isinstance(low, (int, float)) else "Dates"
    return f"{kind} from {low} to {high}." if low != high else f"Always {low}."


def cryptic(column: ColumnEntry) -> bool:
    """A name that says nothing by itself: short, or holding a digit, and no natural name given."""
    name = readable(column.name).replace(" ", "")
    return not column.natural_name.strip() and (len(name) <= CRYPTIC_NAME_CHARS or any(ch.isdigit() for ch in name))


def _gloss(column: ColumnEntry) -> str:
    if not (cryptic(column) and column.description.strip()):
        return column_label(column)
    words = column.description.split()
    return f"{column_label(column)} ({' '.join(words[:GLOSS_WORDS])}{'…' if len(words) > GLOSS_WORDS else ''})"


def column_text(table: TableEntry, column: ColumnEntry) -> str:
    parts = [f"{table_label(table)} {column_label(column)}."]
    if column.description:
        parts.append(_sentence(column.description))
    if column.value_description:
        # BIRD's value descriptions open with boilerplate that carries no meaning.
        value_desc = re.sub(r"(?i)commonsense (evidence|reasoning)\s*:?", " ", column.value_description)
        parts.append(_sentence(value_desc))
    if column.aliases:
        parts.append("Also called: " + ", ".join(sorted(column.aliases)) + ".")
    parts.append(_range(column))
    samples = _samples(column)
    if samples:
        parts.append(f"Values: {samples}.")
    return " ".join(p for p in parts if p.strip())


def table_text(kb: KnowledgeBase, table: TableEntry) -> str:
    parts = [f"Table {table_label(table)}."]
    if table.description:
        parts.append(_sentence(table.description))
    parts.append("Columns: " + ", ".join(_gloss(c) for c in table.columns) + ".")
    joins = sorted({readable(fk.ref_table if fk.table == table.name else fk.table)
                    for fk in kb.foreign_keys if table.name in (fk.table, fk.ref_table)} - {readable(table.name)})
    if joins:
        parts.append("Joins " + ", ".join(joins) + ".")
    return " ".join(parts)


def example_text(example: Example) -> str:
    return example.question + (" " + example.evidence if example.evidence else "")


def example_id(example: Example) -> str:
    return hashlib.sha256(f"{example.question}\x00{example.sql}".encode()).hexdigest()[:20]


def collection_for_table(name: str) -> str:
    """A chroma-safe, unique collection name: table names may hold spaces or any character."""
    slug = re.sub(r"[^a-zA-Z0-9_-]+", "_", name)[:40].strip("_-") or "t"
    return f"t-{slug}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


GLOBAL = "tables"
EXAMPLES = "examples"


def documents(kb: KnowledgeBase) -> dict[str, list[Document]]:
    """``{collection name: documents}`` for every collection the KB needs."""
    out: dict[str, list[Document]] = {GLOBAL: [], EXAMPLES: []}
    for table in kb.tables:
        out[GLOBAL].append(Document(table.name, table_text(kb, table), {"table": table.name}))
        out[collection_for_table(table.name)] = [
            Document(c.name, column_text(table, c), {"table": table.name, "column": c.name}) for c in table.columns
        ]
    for example in kb.examples:
        out[EXAMPLES].append(Document(example_id(example), example_text(example), {"sql": example.sql}))
    return out
