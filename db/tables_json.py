"""Foreign keys from a Spider/BIRD ``tables.json`` entry.

Such files list keys as pairs of indices into ``column_names_original`` (``[table_index, name]``).
Many benchmark databases declare few or none of them, so these pairs are the only join graph.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from reflect_sql.db.schema import ForeignKey, Schema
from reflect_sql.errors import UserError
from reflect_sql.files import read_json_file


def load_entry(tables_json: str | Path, db_id: str) -> dict[str, Any]:
    path = Path(tables_json)
    entries = read_json_file(path, "tables.json file")
    if not isinstance(entries, list):
        raise UserError(f"{path} must hold a list of database entries (Spider/BIRD tables.json)")
    for entry in entries:
        if isinstance(entry, dict) and entry.get("db_id") == db_id:
            return entry
    known = sorted(str(e.get("db_id")) for e in entries if isinstance(e, dict))
    raise UserError(f"db_id {db_id!r} is not in {path} (it has: {', '.join(known[:20])})")


def foreign_keys(entry: dict[str, Any], schema: Schema) -> list[ForeignKey]:
    """The entry's keys as single-column ForeignKeys, names resolved against ``schema``.

    Pairs naming a table or column the database does not have are dropped: the database is the
    truth, and a key to nothing would mislead every prompt that shows it.
    """
    try:
        tables = entry["table_names_original"]
        columns = entry["column_names_original"]
        pairs = entry.get("foreign_keys", [])
    except KeyError as exc:
        raise UserError(f"tables.json entry {entry.get('db_id')!r} lacks {exc}") from None

    def resolve(index: int) -> tuple[str, str] | None:
        if not 0 <= index < len(columns):
            return None
        table_index, column_name = columns[index]
        if not 0 <= table_index < len(tables):
            return None
        table = schema.table(tables[table_index])
        column = table.column(column_name) if table else None
        return (table.name, column.name) if table and column else None

    out = []
    for pair in pairs:
        if len(pair) != 2:
            continue
        source, target = resolve(pair[0]), resolve(pair[1])
        if source and target:
            out.append(ForeignKey(source[0], [source[1]], target[0], [target[1]], source="tables.json"))
    return out


def merge(declared: list[ForeignKey], extra: list[ForeignKey]) -> list[ForeignKey]:
    """Declared keys plus the extra ones no declared key (or earlier extra key) already covers."""
    seen = {
        (fk.table.lower(), col.lower(), fk.ref_table.lower(), ref.lower())
        for fk in declared
        for col, ref in zip(fk.columns, fk.ref_columns)
    }
    merged = list(declared)
    for fk in extra:
        keys = {(fk.table.lower(), c.lower(), fk.ref_table.lower(), r.lower()) for c, r in zip(fk.columns, fk.ref_columns)}
        if keys <= seen:
            continue
        seen |= keys
        merged.append(fk)
    return merged
