"""The restaurant scenario as a BIRD-format dataset root, so that ``eval``, ``ablate`` and the benches
run on it as on BIRD: ``dev.json`` (the question set, or a chosen part of it) and
``dev_databases/smartrestaurant/`` holding the database, its ``database_description`` CSVs and its
``glossary.yaml``.

``twins``: only the Vietnamese questions and their English twins (the English question with the
same gold SQL), each Vietnamese question right after its twin.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from reflect_sql.experiments.smartrestaurant import DB_ID, DESCRIPTIONS_DIR, GLOSSARY, QUESTIONS
from reflect_sql.experiments.smartrestaurant.demo_db import ensure_demo_db
from reflect_sql.files import atomic_file


def twin_pairs(entries: list[dict]) -> list[tuple[dict, dict]]:
    """(English, Vietnamese) questions with the same gold SQL, in the Vietnamese questions' order."""
    english: dict[str, dict] = {}
    for e in entries:
        if e["lang"] == "en":
            english.setdefault(" ".join(e["SQL"].split()), e)
    pairs = []
    for e in entries:
        if e["lang"] == "vi":
            twin = english.get(" ".join(e["SQL"].split()))
            if twin is not None:
                pairs.append((twin, e))
    return pairs


def write_bird_layout(root: str | Path, *, twins: bool = False, seed: int = 0) -> tuple[Path, Path]:
    """Write (or refresh) the dataset root; returns (root, the database file). An existing database
    of the same seed is kept."""
    root = Path(root)
    db_dir = root / "dev_databases" / DB_ID
    db_dir.mkdir(parents=True, exist_ok=True)
    database = ensure_demo_db(db_dir / f"{DB_ID}.sqlite", seed).path
    descriptions = db_dir / "database_description"
    if descriptions.exists():
        shutil.rmtree(descriptions)
    shutil.copytree(DESCRIPTIONS_DIR, descriptions)
    shutil.copyfile(GLOSSARY, db_dir / "glossary.yaml")
    entries = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    if twins:
        entries = [e for pair in twin_pairs(entries) for e in pair]
    with atomic_file(root / "dev.json") as tmp:  # an eval reading it never sees half a question set
        tmp.write_text(json.dumps(entries, indent=1, ensure_ascii=False), encoding="utf-8")
    return root, Path(database)
