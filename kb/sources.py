"""Readers for the knowledge a KB is built from, besides the engine's own introspection.

- BIRD ``database_description/<table>.csv`` files (one per table);
- Spider/BIRD ``tables.json`` (natural-language names of tables and columns);
- training pairs (question, evidence, SQL) as a JSON list or JSON lines;
- a glossary YAML (``terms``: term -> meaning; ``aliases``: alias -> value).

Every reader fails with a UserError that names the file, never with a traceback.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path


from reflect_sql.errors import UserError
from reflect_sql.files import read_json_file, read_yaml_mapping

DESCRIPTION_FIELDS = ("original_column_name", "column_name", "column_description", "data_format", "value_description")


@dataclass
class ColumnNote:
    """One row of a BIRD description CSV."""

    name: str
    natural_name: str = ""
    description: str = ""
    data_format: str = ""
    value_description: str = ""


@dataclass
class TrainingPair:
    question: str
    sql: str
    evidence: str = ""
    db_id: str | None = None


@dataclass
class Glossary:
    terms: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)


def decode_text(data: bytes) -> str:
    """BIRD's CSVs mix UTF-8 (some with a BOM) and Windows-1252 (bullets, en dashes)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        # cp1252 leaves five bytes undefined; latin-1 maps every byte, so nothing is lost.
        return data.decode("latin-1")


def _clean(text: str | None) -> str:
    # Descriptions carry stray BOMs mid-file, non-breaking spaces and CRLF; keep the words only.
    text = (text or "").replace("\ufeff", "").replace("\xa0", " ").replace("\r\n", "\n").replace("\r", "\n")
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return "\n".join(line for line in lines if line).strip()


def read_description_csv(path: str | Path) -> list[ColumnNote]:
    path = Path(path)
    try:
        text = decode_text(path.read_bytes())
    except OSError as exc:
        raise UserError(f"cannot read description file {path}: {exc.strerror or exc}") from None
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        return []
    header = [_clean(h).lower() for h in header]
    if not header or header[0] != "original_column_name":
        raise UserError(f"{path}: not a BIRD description CSV (its first column is {header[:1]}, "
                        f"expected {DESCRIPTION_FIELDS[0]!r})")
    index = {name: header.index(name) for name in DESCRIPTION_FIELDS if name in header}
    named = set(index.values())
    notes = []
    for row in reader:
        def get(name: str) -> str:
            i = index.get(name)
            return _clean(row[i]) if i is not None and i < len(row) else ""

        name = get("original_column_name")
        if not name:
            continue
        # Cells past the named fields (financial/account.csv puts a value description there) are
        # still about values: keep them rather than drop them.
        stray = [_clean(cell) for i, cell in enumerate(row) if i not in named and _clean(cell)]
        value_description = "\n".join(v for v in [get("value_description"), *stray] if v)
        notes.append(ColumnNote(
            name=name,
            natural_name=get("column_name"),
            description=get("column_description"),
            data_format=get("data_format"),
            value_description=value_description,
        ))
    return notes


def read_descriptions(folder: str | Path) -> dict[str, dict[str, ColumnNote]]:
    """``{table (lower-case): {column (lower-case): note}}`` from a ``database_description`` folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"descriptions folder not found: {folder}")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".csv")
    if not files:
        raise UserError(f"descriptions folder {folder} holds no .csv files")
    out: dict[str, dict[str, ColumnNote]] = {}
    for path in files:
        table = _clean(path.stem).lower()
        out[table] = {note.name.lower(): note for note in read_description_csv(path)}
    return out


@dataclass
class NaturalNames:
    """Human-readable names from a tables.json entry, keyed by lower-case original names."""

    tables: dict[str, str] = field(default_factory=dict)
    columns: dict[tuple[str, str], str] = field(default_factory=dict)


def read_tables_json(path: str | Path, db_id: str | None = None) -> NaturalNames:
    path = Path(path)
    data = read_json_file(path, "tables.json file", json_lines=True)
    entries = data if isinstance(data, list) else [data]
    entries = [e for e in entries if isinstance(e, dict) and "table_names_original" in e]
    if not entries:
        raise UserError(f"{path} holds no tables.json entries (no table_names_original)")
    if db_id is not None:
        entries = [e for e in entries if e.get("db_id") == db_id]
        if not entries:
            raise UserError(f"{path} has no entry for db_id {db_id!r}")
    elif len(entries) > 1:
        ids = ", ".join(str(e.get("db_id")) for e in entries[:5])
        raise UserError(f"{path} describes {len(entries)} databases ({ids}, ...): say which db_id")
    entry = entries[0]
    originals = entry["table_names_original"]
    naturals = entry.get("table_names") or originals
    names = NaturalNames(tables={o.lower(): n for o, n in zip(originals, naturals)})
    col_orig = entry.get("column_names_original", [])
    col_nat = entry.get("column_names") or col_orig
    for (t_idx, orig), (_, nat) in zip(col_orig, col_nat):
        if t_idx < 0:
            continue
        names.columns[(originals[t_idx].lower(), orig.lower())] = nat
    return names


def read_training_pairs(path: str | Path, db_id: str | None = None) -> list[TrainingPair]:
    """BIRD (``question, evidence, SQL``) or Spider (``question, query``) records; ``db_id`` filters."""
    path = Path(path)
    data = read_json_file(path, "training pairs file", json_lines=True)
    if isinstance(data, dict):  # JSON lines with a single line
        data = [data]
    if not isinstance(data, list):
        raise UserError(f"{path}: training pairs must be a JSON list or JSON lines of objects")
    pairs = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise UserError(f"{path}: item {i} is not an object")
        # Spider's "sql" is its parsed form (an object); the text is in "query".
        sql = next((item[k] for k in ("SQL", "query", "sql") if isinstance(item.get(k), str)), None)
        question = item.get("question")
        if not isinstance(sql, str) or not isinstance(question, str):
            raise UserError(f"{path}: item {i} lacks a question and an SQL/query string")
        if db_id is not None and item.get("db_id") not in (None, db_id):
            continue
        pairs.append(TrainingPair(question=question.strip(), sql=sql.strip(),
                                  evidence=(item.get("evidence") or "").strip(), db_id=item.get("db_id")))
    return pairs


def read_glossary(path: str | Path) -> Glossary:
    path = Path(path)
    data = read_yaml_mapping(path, "glossary")
    if not set(data) <= {"terms", "aliases"}:
        raise UserError(f"glossary {path} must be a mapping with 'terms' and/or 'aliases'")
    out = Glossary()
    for key in ("terms", "aliases"):
        section = data.get(key) or {}
        if not isinstance(section, dict):
            raise UserError(f"glossary {path}: '{key}' must map strings to strings")
        for k, v in section.items():
            if not isinstance(k, (str, int, float)) or not isinstance(v, (str, int, float)):
                raise UserError(f"glossary {path}: '{key}' entry {k!r} must map a string to a string")
            getattr(out, key)[str(k)] = str(v)
    return out
