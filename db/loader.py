"""ADMIN path: copy a SQLite database into a PostgreSQL schema.

This is the one module in ``db`` that writes, and only to PostgreSQL, on its own connection; the
engines never use it. Tests load the BIRD databases with it, and the SmartRestaurant demo data
reaches PostgreSQL through it.

Declared SQLite types map to PostgreSQL ones by SQLite's affinity rules, but SQLite stores any
value in any column (BIRD has empty strings in INTEGER columns), so each column is checked against
its data first and falls back to ``text`` when a value does not fit. Primary and foreign keys are
added after the data and skipped, with a note, when the data violates them.

Read the copy back with ``open_engine(schema_url(pg_url, schema))``.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from reflect_sql.db.base import ConnectionFailed
from reflect_sql.db.identifiers import quote_identifier
from reflect_sql.db.postgres import redact, split_schema

# sqlite typeof() values each PostgreSQL type accepts.
_FITS = {
    "bigint": {"integer", "null"},
    "double precision": {"integer", "real", "null"},
    "numeric": {"integer", "real", "null"},
    "text": {"integer", "real", "text", "blob", "null"},
}


@dataclass
class LoadReport:
    schema: str
    rows: dict[str, int] = field(default_factory=dict)
    types: dict[str, dict[str, str]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # constraints the data does not satisfy


def declared_to_pg(declared: str) -> str:
    """SQLite's affinity rules (section 3.1 of its datatype page), mapped to PostgreSQL types."""
    t = (declared or "").upper()
    if "INT" in t:
        return "bigint"
    if any(k in t for k in ("CHAR", "CLOB", "TEXT")):
        return "text"
    if any(k in t for k in ("REAL", "FLOA", "DOUB")):
        return "double precision"
    if any(k in t for k in ("NUMERIC", "DECIMAL")):
        return "numeric"
    return "text"  # BLOB, no type, DATE, DATETIME, BOOLEAN...: text keeps every value


def schema_url(pg_url: str, schema: str) -> str:
    """``pg_url`` with a ``schema=`` parameter, which ``open_engine`` turns into a search_path."""
    parts = urlsplit(pg_url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    query.append(("schema", schema))
    return urlunsplit(parts._replace(query=urlencode(query)))


def _to_text(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return str(value).replace("\x00", "")  # PostgreSQL text cannot hold NUL


def copy_sqlite_to_postgres(sqlite_path: str | Path, pg_url: str, schema_name: str) -> LoadReport:
    """Drop and recreate ``schema_name`` in PostgreSQL and fill it with every table of the SQLite file."""
    path = Path(sqlite_path)
    if not path.is_file():
        raise ConnectionFailed(f"SQLite database not found: {path}")
    src = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    src.text_factory = lambda b: b.decode("utf-8", errors="replace")
    conninfo, _ = split_schema(pg_url)
    try:
        dst = psycopg.connect(conninfo)
    except psycopg.Error as exc:
        src.close()
        raise ConnectionFailed(f"cannot connect to PostgreSQL at {redact(pg_url)}: {exc}") from None
    report = LoadReport(schema=schema_name)
    try:
        with dst.transaction():
            _copy(src, dst, schema_name, report)
    finally:
        src.close()
        dst.close()
    return report


def _copy(src: sqlite3.Connection, dst: psycopg.Connection, schema: str, report: LoadReport) -> None:
    s = sql.Identifier(schema)
    dst.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(s))
    dst.execute(sql.SQL("CREATE SCHEMA {}").format(s))
    tables = [
        r[0]
        for r in src.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid"
        )
    ]
    infos = {t: src.execute(f"PRAGMA table_info({quote_identifier(t, 'sqlite')})").fetchall() for t in tables}
    for table in tables:
        types: dict[str, str] = {}
        for _cid, column, declared, *_ in infos[table]:
            pg_type = declared_to_pg(declared)
            seen = {r[0] for r in src.execute(f"SELECT DISTINCT typeof({quote_identifier(column, 'sqlite')}) FROM {quote_identifier(table, 'sqlite')}")}
            types[column] = pg_type if seen <= _FITS[pg_type] else "text"
        report.types[table] = types
        target = sql.Identifier(schema, table)
        dst.execute(
            sql.SQL("CREATE TABLE {} ({})").format(
                target,
                sql.SQL(", ").join(sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(t)) for c, t in types.items()),
            )
        )
        text_columns = [i for i, t in enumerate(types.values()) if t == "text"]
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in types)
        count = 0
        with dst.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(target, columns)) as copy:
            for row in src.execute(f"SELECT * FROM {quote_identifier(table, 'sqlite')}"):
                if text_columns:
                    row = list(row)
                    for i in text_columns:
                        row[i] = _to_text(row[i])
                copy.write_row(row)
                count += 1
        report.rows[table] = count

    for table in tables:
        pk = [r[1] for r in sorted((r for r in infos[table] if r[5]), key=lambda r: r[5])]
        if pk:
            _try(dst, report, f"primary key of {table}", sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(
                sql.Identifier(schema, table), sql.SQL(", ").join(sql.Identifier(c) for c in pk)))
    by_lower = {t.lower(): t for t in tables}
    for table in tables:
        groups: dict[int, list[tuple]] = {}
        for row in src.execute(f"PRAGMA foreign_key_list({quote_identifier(table, 'sqlite')})"):
            groups.setdefault(row[0], []).append(row)
        for parts in groups.values():
            parts.sort(key=lambda r: r[1])
            ref = by_lower.get(parts[0][2].lower())
            if ref is None:
                report.skipped.append(f"foreign key {table} -> {parts[0][2]}: no such table")
                continue
            ref_pk = [r[1] for r in sorted((r for r in infos[ref] if r[5]), key=lambda r: r[5])]
            to_cols = [_actual(infos[ref], r[4]) for r in parts] if all(r[4] for r in parts) else ref_pk
            from_cols = [_actual(infos[table], r[3]) for r in parts]
            if len(to_cols) != len(parts) or None in to_cols or None in from_cols:
                report.skipped.append(f"foreign key {table} -> {ref}: cannot tell the referenced columns")
                continue
            _try(dst, report, f"foreign key {table}({', '.join(from_cols)}) -> {ref}",
                 sql.SQL("ALTER TABLE {} ADD FOREIGN KEY ({}) REFERENCES {} ({})").format(
                     sql.Identifier(schema, table),
                     sql.SQL(", ").join(sql.Identifier(c) for c in from_cols),
                     sql.Identifier(schema, ref),
                     sql.SQL(", ").join(sql.Identifier(c) for c in to_cols)))


def _actual(info: list[tuple], name: str) -> str | None:
    """A column's declared spelling: SQLite matches names case-insensitively, PostgreSQL does not."""
    return next((r[1] for r in info if r[1].lower() == name.lower()), None)


def _try(dst: psycopg.Connection, report: LoadReport, what: str, statement: sql.Composed) -> None:
    try:
        with dst.transaction():  # a savepoint: one failed constraint must not undo the load
            dst.execute(statement)
    except psycopg.Error as exc:
        report.skipped.append(f"{what}: {str(exc).strip().splitlines()[0]}")
