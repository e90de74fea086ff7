"""Building and incrementally rebuilding a KB: versions, content hashes, sources, what is embedded."""
from __future__ import annotations

import json
import sqlite3

import pytest

from reflect_sql.errors import UserError
from reflect_sql.kb import embedding
from reflect_sql.kb.build import SOURCES_FILE, build_kb
from reflect_sql.kb.retrieve import Retriever
from reflect_sql.kb.versions import KBDir

DISH_CSV = ("original_column_name,column_name,column_description,data_format,value_description\n"
            "dish_id,,id of the dish,integer,\ndish_name,dish name,{meaning},text,\n")


def _descriptions(folder, meaning):
    folder.mkdir(exist_ok=True)
    (folder / "dish.csv").write_text(DISH_CSV.format(meaning=meaning), encoding="utf-8")
    return folder


def test_first_build_then_unchanged_rebuild_embeds_nothing(school_db, tmp_path, settings):
    kb_dir = tmp_path / "kb"
    first = build_kb(str(school_db), kb_dir, settings)
    kb = KBDir(kb_dir).load()
    assert first.new_version and first.version == 1 and kb.database == str(school_db.resolve())
    # One document per table (global) and per column (local collections).
    assert first.embedded == len(kb.tables) + sum(len(t.columns) for t in kb.tables) == 4 + 14
    assert first.values_indexed > 0 and (kb_dir / SOURCES_FILE).is_file()

    before = embedding.embedded_count
    again = build_kb(str(school_db), kb_dir, settings)
    assert (again.new_version, again.embedded, again.version) == (False, 0, 1)
    assert embedding.embedded_count == before
    # Without the sources shortcut the database is read again; content hashes still find nothing new.
    (kb_dir / SOURCES_FILE).unlink()
    reread = build_kb(str(school_db), kb_dir, settings)
    assert (reread.new_version, reread.embedded, reread.values_reindexed) == (False, 0, False)
    assert embedding.embedded_count == before
    assert len(KBDir(kb_dir).history()) == 1


def test_changed_description_re_embeds_only_that_column(school_db, tmp_path, settings):
    kb_dir = tmp_path / "kb"
    build_kb(str(school_db), kb_dir, settings, descriptions=_descriptions(tmp_path / "d", "name of the dish"))
    changed = build_kb(str(school_db), kb_dir, settings,
                       descriptions=_descriptions(tmp_path / "d", "the dish as printed on the menu"))
    assert changed.new_version and changed.version == 2 and changed.embedded == 1
    column = KBDir(kb_dir).load().column("dish", "dish_name")
    assert (column.description, column.description_source, column.natural_name) == (
        "the dish as printed on the menu", "csv", "dish name")


def test_schema_change_adds_and_drops_collections(school_db, tmp_path, settings):
    kb_dir = tmp_path / "kb"
    build_kb(str(school_db), kb_dir, settings)
    conn = sqlite3.connect(school_db)
    conn.executescript("DROP TABLE dish; CREATE TABLE teacher (teacher_id INTEGER PRIMARY KEY, subject TEXT);"
                       "INSERT INTO teacher VALUES (1, 'Chemistry');")
    conn.commit()
    conn.close()
    report = build_kb(str(school_db), kb_dir, settings)
    kb = KBDir(kb_dir).load()
    assert report.new_version and {t.name for t in kb.tables} == {"student", "course", "enrollment", "teacher"}
    assert report.embedded == 1 + 2  # the teacher table and its two columns
    retriever = Retriever(kb_dir, settings)
    assert [v.value for v in retriever.values.lookup("who teaches chemistry")] == ["Chemistry"]
    assert retriever.values.lookup("Trà sữa nướng") == []  # the dropped table's values are gone
    retriever.close()


def test_glossary_and_training_pairs(school_db, tmp_path, settings):
    glossary = tmp_path / "glossary.yaml"
    glossary.write_text("terms:\n  credit load: sum of course.credits per student\n"
                        "aliases:\n  roasted milk tea: Trà sữa nướng\n", encoding="utf-8")
    train = tmp_path / "train.json"
    train.write_text(json.dumps([
        {"question": "How many credits is Thermodynamics worth?",
         "SQL": "SELECT credits FROM course WHERE title = 'Thermodynamics'"},
        {"question": "broken", "SQL": "SELECT nope FROM nowhere"},
    ]))
    report = build_kb(str(school_db), tmp_path / "kb", settings, glossary=glossary, train=train)
    assert report.examples == 1 and any("1 training pairs skipped" in w for w in report.warnings)
    kb = KBDir(tmp_path / "kb").load()
    assert (kb.examples[0].tables, kb.examples[0].columns) == (["course"], ["course.credits", "course.title"])
    retriever = Retriever(tmp_path / "kb", settings)
    context = retriever.retrieve("What does a roasted milk tea cost, and what is my credit load?")
    assert "dish.dish_name" in context.columns
    assert context.values[0].value == "Trà sữa nướng" and context.values[0].alias == "roasted milk tea"
    assert context.terms == {"credit load": "sum of course.credits per student"}
    similar = retriever.retrieve("How many credits is Linear Algebra worth?")
    assert similar.examples and similar.examples[0].sql.startswith("SELECT credits FROM course")
    retriever.close()


def test_a_kb_dir_belongs_to_one_database(school_db, tmp_path, settings):
    build_kb(str(school_db), tmp_path / "kb", settings)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).executescript("CREATE TABLE t (x TEXT);")
    with pytest.raises(UserError, match="holds the KB of"):
        build_kb(str(other), tmp_path / "kb", settings)
