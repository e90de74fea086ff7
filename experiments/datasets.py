"""Benchmark loaders for the BIRD and Spider formats, read in place from any root.

BIRD:   <root>/dev.json (question_id, db_id, question, evidence, SQL, difficulty)
        <root>/dev_databases/<db>/<db>.sqlite, <root>/dev_databases/<db>/database_description/*.csv
        <root>/dev_tables.json
Spider: <root>/dev.json (db_id, question, query, ...), <root>/database/<db>/<db>.sqlite,
        <root>/tables.json

``load_questions`` takes the three locations separately (what ``reflect-sql score`` needs);
``load_dataset`` finds them under a root. Selection (``db_ids``, ``sample``/``seed``, ``limit``)
happens before databases are checked, so a subset runs even when other databases are absent.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reflect_sql.errors import UserError
from reflect_sql.files import read_json_file

FORMATS = ("bird", "spider")
DIFFICULTIES = ("simple", "moderate", "challenging")

# Field holding the gold SQL in each format.
_GOLD_FIELD = {"bird": "SQL", "spider": "query"}
_DB_DIR = {"bird": "dev_databases", "spider": "database"}


@dataclass(frozen=True)
class Question:
    #: BIRD's question_id; Spider has none, so its position in the file.
    question_id: int | str
    #: Position in the questions file: the key of the official BIRD predictions format.
    index: int
    db_id: str
    question: str
    evidence: str
    gold_sql: str
    difficulty: str | None
    db_path: Path
    descriptions_dir: Path | None
    tables_json: Path | None
    #: ``<db dir>/glossary.yaml`` when the database has one (business terms and value aliases).
    glossary: Path | None = None

    @property
    def key(self) -> str:
        """Stable identifier used in result files and for resuming."""
        return str(self.question_id)


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise UserError(f"unknown dataset format {fmt!r} (expected one of: {', '.join(FORMATS)})")
    return fmt


def _text_field(entry: Any, field: str, path: Path, pos: int, *, required: bool = True) -> str:
    if not isinstance(entry, dict):
        raise UserError(f"{path}: entry {pos} is a {type(entry).__name__}, expected an object")
    value = entry.get(field)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise UserError(f"{path}: entry {pos} has no usable {field!r} field")
    return value


def default_tables_json(fmt: str, questions_path: Path) -> Path | None:
    """BIRD names it after the split (dev.json -> dev_tables.json); Spider calls it tables.json."""
    folder = questions_path.parent
    candidates = [folder / f"{questions_path.stem}_tables.json", folder / "tables.json"]
    if fmt == "spider":
        candidates.reverse()
    return next((c for c in candidates if c.is_file()), None)


def default_db_root(fmt: str, questions_path: Path) -> Path:
    folder = questions_path.parent
    named = folder / f"{questions_path.stem}_databases"  # BIRD: dev.json -> dev_databases/
    if fmt == "bird" and named.is_dir():
        return named
    return folder / _DB_DIR[fmt]


def select(
    questions: list[Question],
    *,
    limit: int | None = None,
    sample: int | None = None,
    seed: int = 0,
    db_ids: list[str] | None = None,
) -> list[Question]:
    """Filter by database, then draw a seeded sample (kept in file order), then cut to ``limit``."""
    if db_ids:
        known = {q.db_id for q in questions}
        unknown = [d for d in db_ids if d not in known]
        if unknown:
            raise UserError(
                f"unknown db_id(s) {', '.join(unknown)}; the questions cover: {', '.join(sorted(known))}"
            )
        wanted = set(db_ids)
        questions = [q for q in questions if q.db_id in wanted]
    if sample is not None:
        if sample < 1:
            raise UserError(f"--sample must be at least 1, got {sample}")
        if sample < len(questions):
            chosen = set(random.Random(seed).sample(range(len(questions)), sample))
            questions = [q for i, q in enumerate(questions) if i in chosen]
    if limit is not None:
        if limit < 1:
            raise UserError(f"--limit must be at least 1, got {limit}")
        questions = questions[:limit]
    return questions


def load_questions(
    fmt: str,
    questions_path: str | Path,
    db_root: str | Path | None = None,
    tables_json: str | Path | None = None,
    *,
    limit: int | None = None,
    sample: int | None = None,
    seed: int = 0,
    db_ids: list[str] | None = None,
    require_databases: bool = True,
) -> list[Question]:
    fmt = _check_format(fmt)
    questions_path = Path(questions_path)
    data = read_json_file(questions_path, "questions file")
    if not isinstance(data, list):
        raise UserError(f"{questions_path}: expected a JSON list of questions, got {type(data).__name__}")
    db_root = Path(db_root) if db_root is not None else default_db_root(fmt, questions_path)
    tables = Path(tables_json) if tables_json is not None else default_tables_json(fmt, questions_path)
    if tables is not None and not tables.is_file():
        raise UserError(f"tables file not found: {tables}")

    out: list[Question] = []
    seen_ids: set[str] = set()
    for pos, entry in enumerate(data):
        db_id = _text_field(entry, "db_id", questions_path, pos)
        question = _text_field(entry, "question", questions_path, pos)
        gold = _text_field(entry, _GOLD_FIELD[fmt], questions_path, pos)
        if fmt == "bird":
            evidence = _text_field(entry, "evidence", questions_path, pos, required=False)
            qid = entry.get("question_id", pos)
            difficulty = entry.get("difficulty")
            if difficulty is not None and difficulty not in DIFFICULTIES:
                raise UserError(
                    f"{questions_path}: entry {pos} has difficulty {difficulty!r} "
                    f"(expected one of: {', '.join(DIFFICULTIES)})"
                )
        else:
            evidence, qid, difficulty = "", pos, None
        if not isinstance(qid, (int, str)) or isinstance(qid, bool):
            raise UserError(f"{questions_path}: entry {pos} has a question_id of type {type(qid).__name__}")
        if str(qid) in seen_ids:
            raise UserError(f"{questions_path}: question_id {qid} appears twice")
        seen_ids.add(str(qid))
        db_dir = db_root / db_id
        descriptions = db_dir / "database_description"
        glossary = db_dir / "glossary.yaml"
        out.append(
            Question(
                question_id=qid,
                index=pos,
                db_id=db_id,
                question=question,
                evidence=evidence,
                gold_sql=gold,
                difficulty=difficulty,
                db_path=db_dir / f"{db_id}.sqlite",
                descriptions_dir=descriptions if descriptions.is_dir() else None,
                tables_json=tables,
                glossary=glossary if glossary.is_file() else None,
            )
        )

    out = select(out, limit=limit, sample=sample, seed=seed, db_ids=db_ids)
    if require_databases:
        missing = sorted({str(q.db_path) for q in out if not q.db_path.is_file()})
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise UserError(f"database file not found: {missing[0]}{more}")
    return out


def load_dataset(fmt: str, root: str | Path, split: str = "dev", **selection: Any) -> list[Question]:
    """Questions of ``<root>/<split>.json`` with the format's usual database and tables locations."""
    root = Path(root)
    if not root.is_dir():
        raise UserError(f"dataset root is not a directory: {root}")
    return load_questions(fmt, root / f"{split}.json", **selection)


def questions_of_run(meta: dict[str, Any]) -> tuple[dict[str, Question], str]:
    """The questions an eval run may have been asked (from its ``run.json``), by key, and the dataset's format.

    ``limit`` is left out: it only cuts a prefix of the selection, and ``run.json`` keeps the first
    invocation's, while a run resumed with a higher ``--limit`` (``ablate --step`` does this every
    round) answers more questions of the same selection."""
    ds = meta["dataset"]
    selection = {k: ds.get(k) for k in ("sample", "seed", "db_ids") if ds.get(k) is not None}
    return {q.key: q for q in load_dataset(ds["format"], ds["root"], ds.get("split", "dev"), **selection)}, ds["format"]


def parse_db_ids(text: str | None) -> list[str] | None:
    if not text:
        return None
    ids = [t.strip() for t in text.split(",") if t.strip()]
    return ids or None
