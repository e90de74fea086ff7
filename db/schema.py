"""The schema model every engine's ``introspect()`` returns, and every room above ``db`` reads.

These are the one set of schema types: the knowledge base's document (``kb/model.py``) extends
them with what it learns about each table and column, and a retrieved schema context
(``kb/context.py``) is a view of the tables and columns it shows.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Protocol, TypeVar


class _Named(Protocol):
    name: str


NamedT = TypeVar("NamedT", bound=_Named)


def find_named(items: Iterable[NamedT], name: str) -> NamedT | None:
    """The first of ``items`` called ``name``, case-insensitively, as SQL identifiers compare."""
    lowered = name.lower()
    return next((item for item in items if item.name.lower() == lowered), None)


@dataclass
class Column:
    name: str
    type: str
    nullable: bool = True
    primary_key: bool = False
    # Distinct non-null values, a few, for prompts and the KB; JSON-safe (str/int/float).
    samples: list[Any] = field(default_factory=list)
    # [smallest, largest] of a number or date column, JSON-safe; [] when not one or not known.
    value_range: list[Any] = field(default_factory=list)


@dataclass
class ForeignKey:
    table: str
    columns: list[str]
    ref_table: str
    ref_columns: list[str]
    # "declared" (from the engine's catalogue) or "tables.json" (from a Spider/BIRD schema file).
    source: str = "declared"

    def render(self) -> str:
        """The join condition: ``a.x = b.y`` (``AND`` between the pairs of a composite key)."""
        return " AND ".join(f"{self.table}.{c} = {self.ref_table}.{r}" for c, r in zip(self.columns, self.ref_columns))


@dataclass
class Table:
    name: str
    columns: list[Column]
    primary_key: list[str] = field(default_factory=list)
    row_count: int | None = None

    def column(self, name: str) -> Column | None:
        return find_named(self.columns, name)


@dataclass
class Schema:
    dialect: str  # sqlglot dialect name: "sqlite" or "postgres"
    tables: list[Table]
    foreign_keys: list[ForeignKey] = field(default_factory=list)

    def table(self, name: str) -> Table | None:
        return find_named(self.tables, name)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Schema":
        return cls(
            dialect=data["dialect"],
            tables=[
                Table(
                    name=t["name"],
                    columns=[Column(**c) for c in t["columns"]],
                    primary_key=list(t.get("primary_key", [])),
                    row_count=t.get("row_count"),
                )
                for t in data["tables"]
            ],
            foreign_keys=[ForeignKey(**fk) for fk in data.get("foreign_keys", [])],
        )

    def sqlglot_mapping(self) -> dict[str, dict[str, str]]:
        """``{table: {column: type}}`` as sqlglot's optimizer expects."""
        return {t.name: {c.name: c.type or "TEXT" for c in t.columns} for t in self.tables}
