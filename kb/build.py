"""Building (and rebuilding) a KB directory from a database and its optional sources.

The JSON document is assembled from the engine's introspection plus descriptions, tables.json
names, training pairs and a glossary; what enrichment or the LLM describer added to an earlier
version is carried over. A new version is committed only when the content changed. Then the
derived indexes (chroma collections, value index) are synced, each touching only what changed.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from reflect_sql.db.base import EngineError
from reflect_sql.db.connect import is_postgres_url, open_engine
from reflect_sql.errors import UserError
from reflect_sql.kb import sources
from reflect_sql.kb.documents import documents, example_id
from reflect_sql.kb.model import ColumnEntry, Example, KnowledgeBase, TableEntry
from reflect_sql.kb.store import open_store
from reflect_sql.kb.values import VALUES_FILE, ValueIndex, indexable_column, indexable_value
from reflect_sql.kb.versions import KBDir
from reflect_sql.settings import Settings

if TYPE_CHECKING:  # the db room (and sqlglot with it) loads only when the database is read
    from reflect_sql.db.base import Engine
    from reflect_sql.db.schema import Schema

SOURCES_FILE = "sources.json"
# Bump when the way a KB is derived from its sources changes: stored source signatures then no
# longer match and the next build redoes everything.
BUILDER_VERSION = 2  # 2: column value ranges

Describer = Callable[[TableEntry, ColumnEntry], str]


@dataclass
class BuildReport:
    kb_dir: str
    version: int
    new_version: bool
    tables: int
    columns: int
    examples: int
    values_indexed: int
    embedded: int
    values_reindexed: bool
    described: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    # "table.column" of each column whose distinct values reached max_distinct_values_per_column.
    capped_columns: list[str] = field(default_factory=list)

    def summary(self) -> str:
        state = f"version {self.version}" + (" (new)" if self.new_version else " (unchanged)")
        return (f"{self.kb_dir}: {state}; {self.tables} tables, {self.columns} columns, {self.examples} examples, "
                f"{self.values_indexed} values; embedded {self.embedded} documents"
                + (f", described {self.described} columns" if self.described else "")
                + f" in {self.seconds:.2f} s"
                + (f"; {len(self.capped_columns)} column(s) at the distinct-values cap, values beyond it not indexed: "
                   + ", ".join(self.capped_columns) if self.capped_columns else ""))


def _base_document(db: str, schema: Schema, notes, names, pairs, glossary, warnings: list[str]) -> KnowledgeBase:
    tables = []
    seen_notes = set()
    for t in schema.tables:
        t_notes = notes.get(t.name.lower(), {})
        if t_notes:
            seen_notes.add(t.name.lower())
        columns = []
        for c in t.columns:
            note = t_notes.get(c.name.lower())
            columns.append(ColumnEntry(
                name=c.name, type=c.type, nullable=c.nullable, primary_key=c.primary_key,
                natural_name=(note.natural_name if note and note.natural_name else
                              names.columns.get((t.name.lower(), c.name.lower()), "")),
                description=note.description if note else "",
                description_source="csv" if note and note.description else "",
                value_description=note.value_description if note else "",
                data_format=note.data_format if note else "",
                samples=list(c.samples), value_range=list(c.value_range),
            ))
        tables.append(TableEntry(name=t.name, columns=columns, natural_name=names.tables.get(t.name.lower(), ""),
                                 primary_key=list(t.primary_key), row_count=t.row_count))
    for missing in sorted(set(notes) - seen_notes):
        warnings.append(f"descriptions name a table the database lacks: {missing}")
    kb = KnowledgeBase(
        database=db, dialect=schema.dialect, tables=tables,
        foreign_keys=[dataclasses.replace(fk, columns=list(fk.columns), ref_columns=list(fk.ref_columns))
                      for fk in schema.foreign_keys],
        terms=dict(glossary.terms), aliases=dict(glossary.aliases),
    )
    # sqlglot loads only when a build has work to do: an unchanged rebuild returns before this.
    from reflect_sql.kb.usage import UsageError, sql_usage

    mapping = kb.sqlglot_mapping()
    unparsed = 0
    for pair in pairs:
        try:
            used_tables, used_columns = sql_usage(pair.sql, mapping, schema.dialect)
        except UsageError:
            unparsed += 1
            continue
        kb.examples.append(Example(question=pair.question, sql=pair.sql, evidence=pair.evidence,
                                   tables=used_tables, columns=used_columns, source="train"))
    if unparsed:
        warnings.append(f"{unparsed} training pairs skipped: their SQL does not resolve against this schema")
    return kb


def _carry_over(new: KnowledgeBase, old: KnowledgeBase) -> None:
    """Keep what enrichment and the describer learnt; the sources cannot produce it again."""
    for table in new.tables:
        old_table = old.table(table.name)
        if old_table is None:
            continue
        for column in table.columns:
            before = old_table.column(column.name)
            if before is None:
                continue
            learnt = before.description_source == "enrichment" or (
                before.description_source == "llm" and not column.description)
            if learnt:
                column.description, column.description_source = before.description, before.description_source
            column.aliases = {**before.aliases, **column.aliases}
    have = {example_id(e) for e in new.examples}
    for example in old.examples:
        if example.source == "enrichment" and example_id(example) not in have:
            new.examples.append(example)


def _distinct_sql(table: str, column: str, limit: int, dialect: str) -> str:
    from reflect_sql.db.identifiers import quote_identifier  # lazy: see TYPE_CHECKING above

    col = quote_identifier(column, dialect)
    return f"SELECT DISTINCT {col} FROM {quote_identifier(table, dialect)} WHERE {col} IS NOT NULL LIMIT {int(limit)}"


def read_values(engine: Engine, kb: KnowledgeBase, warnings: list[str], cap: int,
                capped: list[str] | None = None) -> list[tuple[str, str, str]]:
    """Distinct text values of every indexable column, at most ``cap`` per column; a column that
    reaches the cap is appended to ``capped`` as "table.column"."""
    rows: list[tuple[str, str, str]] = []
    for table in kb.tables:
        for column in table.columns:
            if not indexable_column(column.name, column.type, column.samples):
                continue
            try:
                result = engine.execute(_distinct_sql(table.name, column.name, cap, engine.dialect), max_rows=cap)
            except EngineError as exc:
                warnings.append(f"values of {table.name}.{column.name} not indexed: {exc.message}")
                continue
            if len(result.rows) >= cap and capped is not None:
                capped.append(f"{table.name}.{column.name}")
            values = [r[0].strip() for r in result.rows if indexable_value(r[0])]
            rows += [(table.name, column.name, v) for v in sorted(set(values))]
    return rows


def alias_rows(kb: KnowledgeBase, index: ValueIndex) -> list[tuple[str, str, str, str]]:
    rows = set()
    for table in kb.tables:
        for column in table.columns:
            rows.update((table.name, column.name, value, alias) for alias, value in column.aliases.items())
    for alias, value in kb.aliases.items():
        for table, column, stored in index.columns_holding(value):
            rows.add((table, column, stored, alias))
    return sorted(rows)


def sync_indexes(kb_dir: Path, kb: KnowledgeBase, values: list[tuple[str, str, str]] | None = None,
                 settings: Settings | None = None, capped: list[str] = ()):
    """Bring the vector store and the value index in line with ``kb``; ``values`` None keeps the
    stored DB values (``capped``: the columns whose values the build cut at the cap). With
    ``settings`` (a build) the store is the one they name, else the KB's own."""
    index = ValueIndex(kb_dir / VALUES_FILE)
    try:
        reindexed = index.replace_values(values, capped) if values is not None else False
        reindexed = index.replace_aliases(alias_rows(kb, index)) or reindexed
        size = index.size()
    finally:
        index.close()
    report = open_store(kb_dir, settings).sync(documents(kb))
    return report, reindexed, size


def canonical_db(db: str) -> str:
    """An absolute path for a database file, so the KB can be reused from any directory."""
    if not is_postgres_url(db) and Path(db).exists():
        return str(Path(db).resolve())
    return db


def _stat(path: str | Path) -> list[Any]:
    st = Path(path).stat()
    return [str(Path(path).resolve()), st.st_size, st.st_mtime_ns]


def source_signature(db: str, settings: Settings, **inputs: Any) -> dict[str, Any] | None:
    """What a build reads, cheaply fingerprinted (paths, sizes, modification times), or None when
    that is impossible (a server database): then every build reads the database again."""
    if not Path(db).is_file():
        return None
    files = {}
    for key in ("tables_json", "glossary", "train"):
        if inputs.get(key):
            files[key] = _stat(inputs[key])
    if inputs.get("descriptions"):
        folder = Path(inputs["descriptions"])
        files["descriptions"] = sorted(_stat(p) for p in folder.glob("*") if p.is_file()) if folder.is_dir() else None
    return {"builder": BUILDER_VERSION, "db": _stat(db), "db_id": inputs.get("db_id"), "files": files,
            "samples_per_column": settings.sample_values_per_column,
            "max_distinct_values_per_column": settings.max_distinct_values_per_column}


def _unchanged(kb_dir: Path, db: str, signature: dict[str, Any], start: float,
               settings: Settings | None = None) -> BuildReport | None:
    """The report of a build that has nothing to do, or None when something may have changed."""
    stored = kb_dir / SOURCES_FILE
    if not stored.is_file() or not (kb_dir / VALUES_FILE).is_file():
        return None
    try:
        if json.loads(stored.read_text(encoding="utf-8")) != signature:
            return None
    except json.JSONDecodeError:
        return None
    kb = KBDir(kb_dir).load()
    if kb.database != db or not open_store(kb_dir, settings).up_to_date(documents(kb)):
        return None
    index = ValueIndex(kb_dir / VALUES_FILE)
    try:
        size = index.size()
    finally:
        index.close()
    return BuildReport(kb_dir=str(kb_dir), version=kb.version, new_version=False, tables=len(kb.tables),
                       columns=sum(len(t.columns) for t in kb.tables), examples=len(kb.examples),
                       values_indexed=size, embedded=0, values_reindexed=False,
                       seconds=time.perf_counter() - start)


def build_from_engine(engine: Engine, db: str, kb_dir: str | Path, settings: Settings, **sources_and_options: Any,
                      ) -> BuildReport:
    """Build under the KB's change lock: a build racing an enrichment would otherwise commit the
    same version number, and one of the two changes would be lost."""
    with KBDir(kb_dir).locked():
        return _build_from_engine(engine, db, kb_dir, settings, **sources_and_options)


def _build_from_engine(engine: Engine, db: str, kb_dir: str | Path, settings: Settings, *,
                       descriptions: str | Path | None = None, tables_json: str | Path | None = None,
                       glossary: str | Path | None = None, train: str | Path | None = None,
                       db_id: str | None = None, describer: Describer | None = None,
                       signature: dict[str, Any] | None = None) -> BuildReport:
    start = time.perf_counter()
    kb_dir = Path(kb_dir)
    db = canonical_db(db)
    warnings: list[str] = []
    if db_id is None and tables_json is not None and Path(db).is_file():
        db_id = Path(db).stem
    directory = KBDir(kb_dir)
    previous = directory.load() if directory.exists() else None
    if previous is not None and previous.database != db:
        raise UserError(f"{kb_dir} holds the KB of {previous.database}, not {db}: use another --kb-dir")

    schema = engine.introspect(str(tables_json) if tables_json else None, db_id)
    notes = sources.read_descriptions(descriptions) if descriptions else {}
    names = sources.read_tables_json(tables_json, db_id) if tables_json else sources.NaturalNames()
    pairs = sources.read_training_pairs(train, db_id) if train else []
    terms = sources.read_glossary(glossary) if glossary else sources.Glossary()
    kb = _base_document(db, schema, notes, names, pairs, terms, warnings)
    if previous is not None:
        _carry_over(kb, previous)

    described = 0
    if describer is not None:
        for table in kb.tables:
            for column in table.columns:
                if not column.description:
                    text = (describer(table, column) or "").strip()
                    if text:
                        column.description, column.description_source = text, "llm"
                        described += 1

    new_version = previous is None or kb.content() != previous.content()
    if new_version:
        what = "first build" if previous is None else "rebuilt from changed sources"
        directory.commit(kb, "build", what, provenance={
            "database": db, "descriptions": str(descriptions or ""), "tables_json": str(tables_json or ""),
            "glossary": str(glossary or ""), "train": str(train or ""), "described_by_llm": described})
    else:
        kb = previous

    capped: list[str] = []
    values = read_values(engine, kb, warnings, settings.max_distinct_values_per_column, capped)
    sync, reindexed, size = sync_indexes(kb_dir, kb, values, settings, capped)
    signature_file = kb_dir / SOURCES_FILE
    # A value read that failed (a timeout) must be retried by the next build, not skipped.
    if signature is not None and not any(w.startswith("values of ") for w in warnings):
        signature_file.write_text(json.dumps(signature, indent=1), encoding="utf-8")
    else:
        signature_file.unlink(missing_ok=True)
    return BuildReport(
        kb_dir=str(kb_dir), version=kb.version, new_version=new_version, tables=len(kb.tables),
        columns=sum(len(t.columns) for t in kb.tables), examples=len(kb.examples), values_indexed=size,
        embedded=sync.embedded, values_reindexed=reindexed, described=described,
        seconds=time.perf_counter() - start, warnings=warnings, capped_columns=capped)


def build_kb(db: str, kb_dir: str | Path, settings: Settings | None = None, *,
             descriptions: str | Path | None = None, tables_json: str | Path | None = None,
             glossary: str | Path | None = None, train: str | Path | None = None, db_id: str | None = None,
             describer: Describer | None = None) -> BuildReport:
    """Open ``db`` read-only and build its KB in ``kb_dir``; see ``build_from_engine``.

    When none of the sources changed since the last build (same files, sizes, modification
    times), it returns at once: the database is not even opened.
    """
    start = time.perf_counter()
    settings = settings or Settings()
    db = canonical_db(str(db))
    kb_dir = Path(kb_dir)
    inputs = dict(descriptions=descriptions, tables_json=tables_json, glossary=glossary, train=train, db_id=db_id)
    signature = source_signature(db, settings, **inputs) if describer is None else None
    if signature is not None:
        report = _unchanged(kb_dir, db, signature, start, settings)
        if report is not None:
            return report
    with open_engine(db, settings) as engine:
        return build_from_engine(engine, db, kb_dir, settings, describer=describer, signature=signature, **inputs)
