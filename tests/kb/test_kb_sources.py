"""Readers of the KB's sources: BIRD description CSVs (all ten shared folders), tables.json,
training pairs, glossary."""
from __future__ import annotations

import json
import sqlite3

import pytest

from reflect_sql.errors import UserError
from reflect_sql.kb.sources import (
    decode_text,
    read_description_csv,
    read_descriptions,
    read_glossary,
    read_tables_json,
    read_training_pairs,
)


def _folders(benchmarks_dir):
    bird = benchmarks_dir / "bird"
    return sorted(bird.glob("dev_databases/*/database_description")) + sorted(
        bird.glob("database_description_only/*/database_description"))


def test_all_ten_bird_description_folders_parse(benchmarks_dir):
    folders = _folders(benchmarks_dir)
    assert len(folders) == 10
    for folder in folders:
        notes = read_descriptions(folder)
        assert set(notes) == {p.stem.strip().lower() for p in folder.glob("*.csv")}
        for table, columns in notes.items():
            assert columns, f"{folder.parent.name}/{table}: no column parsed"
            for key, note in columns.items():
                # BOMs, stray spaces and CRLF never reach names or texts.
                assert key == note.name.lower() and note.name == note.name.strip() and note.name
                for text in (note.name, note.natural_name, note.description, note.value_description):
                    assert "\ufeff" not in text and "\r" not in text
    # Windows-1252 bytes are decoded, not replaced (student_club/zip_code.csv ships U+FFFD itself).
    raw_replacements = sum(p.read_bytes().count("\ufffd".encode()) for f in folders for p in f.glob("*.csv"))
    parsed = sum(text.count("\ufffd") for f in folders for cols in read_descriptions(f).values()
                 for n in cols.values() for text in (n.description, n.value_description, n.natural_name))
    assert parsed == raw_replacements


def test_descriptions_cover_every_column_of_the_dev_databases(benchmarks_dir):
    for db_dir in sorted((benchmarks_dir / "bird" / "dev_databases").iterdir()):
        notes = read_descriptions(db_dir / "database_description")
        conn = sqlite3.connect(db_dir / f"{db_dir.name}.sqlite")
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        for table in tables:
            for row in conn.execute(f'PRAGMA table_info("{table}")'):
                assert row[1].lower() in notes[table.lower()], f"{db_dir.name}.{table}.{row[1]} undescribed"
        conn.close()


def test_windows_1252_and_bom_files_decode(benchmarks_dir):
    bird = benchmarks_dir / "bird"
    budget = read_descriptions(bird / "dev_databases" / "student_club" / "database_description")["budget"]
    # 0x95 in this cp1252 file is a bullet.
    assert "• Closed: It means that the event is closed." in budget["event_status"].value_description
    qualifying = (bird / "database_description_only" / "formula_1" / "database_description" / "qualifying.csv")
    assert "Grand Prix – a race" in decode_text(qualifying.read_bytes())  # 0x96: an en dash
    frpm = read_descriptions(bird / "database_description_only" / "california_schools" / "database_description")["frpm"]
    assert "school code" in frpm  # "School Code " in a BOM-prefixed file
    # A header with a trailing empty column (financial/account.csv) still parses by name.
    account = read_descriptions(bird / "database_description_only" / "financial" / "database_description")["account"]
    assert account["frequency"].value_description.startswith('"POPLATEK MESICNE" stands for monthly issuance')


def test_bad_description_input_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        read_descriptions(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no .csv"):
        read_descriptions(tmp_path / "empty")
    bad = tmp_path / "t.csv"
    bad.write_text("name,meaning\nx,y\n")
    with pytest.raises(UserError, match="not a BIRD description CSV"):
        read_description_csv(bad)


def test_tables_json_names(benchmarks_dir):
    names = read_tables_json(benchmarks_dir / "spider" / "tables.json", "flight_2")
    assert names.columns[("flights", "flightno")] == "flight number"
    assert names.tables["airports"] == "airports"
    with pytest.raises(UserError, match="no entry for db_id"):
        read_tables_json(benchmarks_dir / "spider" / "tables.json", "nope")
    with pytest.raises(UserError, match="say which db_id"):
        read_tables_json(benchmarks_dir / "spider" / "tables.json")


def test_training_pairs_both_formats(benchmarks_dir, tmp_path):
    bird = read_training_pairs(benchmarks_dir / "bird" / "dev.json", "superhero")
    assert len(bird) == 129 and all(p.db_id == "superhero" for p in bird)
    assert bird[0].evidence and bird[0].sql.startswith("SELECT")
    spider = read_training_pairs(benchmarks_dir / "spider" / "dev.json", "singer")
    assert len(spider) == 30 and spider[0].evidence == ""
    lines = tmp_path / "pairs.jsonl"
    lines.write_text('{"question": "q1", "sql": "SELECT 1"}\n{"question": "q2", "query": "SELECT 2"}\n')
    assert [p.sql for p in read_training_pairs(lines)] == ["SELECT 1", "SELECT 2"]
    lines.write_text('{"question": "q1"}\n')
    with pytest.raises(UserError, match="lacks a question and an SQL"):
        read_training_pairs(lines)


def test_glossary(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("terms:\n  revenue: sum of price times quantity\naliases:\n  bubble tea: Trà sữa nướng\n",
                    encoding="utf-8")
    glossary = read_glossary(path)
    assert glossary.terms == {"revenue": "sum of price times quantity"}
    assert glossary.aliases == {"bubble tea": "Trà sữa nướng"}
    path.write_text("words:\n  a: b\n")
    with pytest.raises(UserError, match="'terms' and/or 'aliases'"):
        read_glossary(path)
    path.write_text(json.dumps({"terms": {"a": ["b"]}}))
    with pytest.raises(UserError, match="must map a string"):
        read_glossary(path)
