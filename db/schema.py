"""The schema model every engine's ``introspect()`` returns, and every room above ``db`` reads."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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


@dataclass
class Table:
    name: str
    columns: list[Column]
    primary_key: list[str] = field(default_factory=list)
    row_count: int | None = None

    def column(self, name: str) -> Column | None:
        lowered = name.lower()
        return next((c for c in self.columns if c.name.lower() == lowered), None)


@dataclass
class Schema:
    dialect: str  # sqlglot dialect name: "sqlite" or "postgres"
    tables: list[Table]
    foreign_keys: list[ForeignKey] = field(default_factory=list)

    def table(self, name: str) -> Table | None:
        lowered = name.lower()
        return next((t for t in self.tables if t.name.lower() == lowered), None)

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
