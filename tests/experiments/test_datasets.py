"""Loaders of the BIRD and Spider formats: fields, selection, and clear errors for bad input."""
from __future__ import annotations

import json

import pytest

from reflect_sql.errors import UserError
from reflect_sql.experiments.datasets import load_dataset, load_questions


def test_bird_loader_reads_every_field(benchmarks_dir):
    qs = load_dataset("bird", benchmarks_dir / "bird")
    assert len(qs) == 287
    q = qs[0]
    assert (q.question_id, q.index, q.db_id, q.difficulty) == (717, 0, "superhero", "simple")
    assert q.evidence.startswith("3-D Man refers to")
    assert q.gold_sql.startswith("SELECT T3.power_name")
    assert q.db_path.is_file() and q.descriptions_dir.is_dir()
    assert q.tables_json.name == "dev_tables.json"


def test_spider_loader_uses_query_field_and_positions(benchmarks_dir):
    qs = load_dataset("spider", benchmarks_dir / "spider")
    assert len(qs) == 594
    assert qs[3].question_id == 3 and qs[3].index == 3
    assert qs[0].gold_sql == "SELECT count(*) FROM singer"
    assert qs[0].evidence == "" and qs[0].difficulty is None and qs[0].descriptions_dir is None
    assert qs[0].tables_json.name == "tables.json"


def test_selection_is_seeded_and_keeps_file_order(benchmarks_dir):
    root = benchmarks_dir / "bird"
    a = load_dataset("bird", root, sample=40, seed=7)
    b = load_dataset("bird", root, sample=40, seed=7)
    c = load_dataset("bird", root, sample=40, seed=8)
    assert [q.key for q in a] == [q.key for q in b] != [q.key for q in c]
    assert [q.index for q in a] == sorted(q.index for q in a)
    only = load_dataset("bird", root, db_ids=["student_club"], limit=5)
    assert len(only) == 5 and {q.db_id for q in only} == {"student_club"}
    with pytest.raises(UserError, match="unknown db_id.*nope"):
        load_dataset("bird", root, db_ids=["nope"])


def test_malformed_files_name_the_file(tmp_path, tiny_bird):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match="bad.json.*not valid JSON"):
        load_questions("bird", bad, tiny_bird / "dev_databases")
    bad.write_text(json.dumps({"question": "x"}))
    with pytest.raises(UserError, match="expected a JSON list"):
        load_questions("bird", bad, tiny_bird / "dev_databases")
    bad.write_text(json.dumps([{"db_id": "shop", "question": "q"}]))
    with pytest.raises(UserError, match="entry 0 has no usable 'SQL'"):
        load_questions("bird", bad, tiny_bird / "dev_databases")
    with pytest.raises(UserError, match="questions file not found: .*absent.json"):
        load_questions("spider", tmp_path / "absent.json", tmp_path)


def test_missing_database_names_the_sqlite_file(tiny_bird, tmp_path):
    data = json.loads((tiny_bird / "dev.json").read_text())
    data.append({**data[0], "question_id": 99, "db_id": "gone"})
    (tiny_bird / "dev.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=r"database file not found: .*gone/gone\.sqlite"):
        load_dataset("bird", tiny_bird)
    # A selection that avoids the missing database still loads.
    assert len(load_dataset("bird", tiny_bird, db_ids=["shop"])) == 3
