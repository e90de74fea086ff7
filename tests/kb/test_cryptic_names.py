"""Names that say nothing (issue 19): a column called ``c14`` or ``t_fed_rev`` is found through
what the KB knows about it (its description, values, type and range), in both retrieval steps."""
from __future__ import annotations

import sqlite3

import pytest

from reflect_sql.kb.build import build_kb
from reflect_sql.kb.documents import column_text, cryptic, table_text
from reflect_sql.kb.retrieve import Retriever
from reflect_sql.kb.versions import KBDir
from reflect_sql.settings import Settings

CSV_HEAD = "original_column_name,column_name,column_description,data_format,value_description\n"


@pytest.fixture()
def census_kb(tmp_path):
    """Two tables with opaque names; only their descriptions say what they hold."""
    db = tmp_path / "census.sqlite"
    with sqlite3.connect(db) as conn:
        conn.executescript("""
            CREATE TABLE t1 (id INTEGER PRIMARY KEY, c1 TEXT, c2 INTEGER, c3 REAL, c4 TEXT, c5 INTEGER, c6 TEXT);
            CREATE TABLE t2 (id INTEGER PRIMARY KEY, c1 TEXT, c2 INTEGER, c3 REAL, c4 TEXT, c5 INTEGER, c6 TEXT);
        """)
        conn.executemany("INSERT INTO t1 VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [(i, f"S{i:03d}", 1990 + i, 10.5 * i, f"D{i}", i * 7, "x") for i in range(1, 30)])
        conn.executemany("INSERT INTO t2 VALUES (?, ?, ?, ?, ?, ?, ?)",
                         [(i, f"H{i:03d}", 3 + i, 1.5 * i, f"W{i}", i, "y") for i in range(1, 30)])
    conn.close()
    notes = tmp_path / "descriptions"
    notes.mkdir()
    (notes / "t1.csv").write_text(CSV_HEAD + (
        "id,,row id,integer,\nc1,,school district code,text,\nc2,,fiscal year of the report,integer,\n"
        "c3,,federal revenue received by the district in dollars,real,\nc4,,district office,text,\n"
        "c5,,number of enrolled pupils,integer,\nc6,,flag,text,\n"), encoding="utf-8")
    (notes / "t2.csv").write_text(CSV_HEAD + (
        "id,,row id,integer,\nc1,,hospital code,text,\nc2,,beds available,integer,\n"
        "c3,,average waiting time for surgery in weeks,real,\nc4,,ward name,text,\n"
        "c5,,nurses on duty,integer,\nc6,,flag,text,\n"), encoding="utf-8")
    build_kb(str(db), tmp_path / "kb", Settings(), descriptions=notes)
    return tmp_path / "kb"


def test_a_column_document_carries_description_values_type_and_range(census_kb):
    kb = KBDir(census_kb).load()
    t1 = kb.table("t1")
    year = t1.column("c2")
    assert year.value_range == [1991, 2019]
    text = column_text(t1, year)
    for part in ("fiscal year of the report", "Numbers from 1991 to 2019", "1991"):
        assert part in text
    assert kb.table("t1").column("c1").value_range == []  # text: no range


def test_the_table_document_glosses_cryptic_names():
    from reflect_sql.kb.model import ColumnEntry, KnowledgeBase, TableEntry

    opaque = ColumnEntry("c3", "REAL", description="federal revenue received by the district in dollars per year")
    plain = ColumnEntry("district_office", "TEXT", description="the office of the district")
    named = ColumnEntry("c4", "TEXT", natural_name="ward name", description="ward of the hospital")
    table = TableEntry("t1", [opaque, plain, named])
    assert cryptic(opaque) and not cryptic(plain) and not cryptic(named)
    text = table_text(KnowledgeBase(dialect="sqlite", tables=[table], database="db"), table)
    assert "c 3 (federal revenue received by the district in dollars…)" in text  # 8 words
    assert "district office," in text and "the office of the district" not in text  # its name says it
    assert "ward name (c 4)" in text


def test_both_retrieval_steps_find_a_column_by_its_description(census_kb):
    retriever = Retriever(census_kb, Settings(context_budget_tokens=0))
    context = retriever.retrieve("What federal revenue did each school district receive?", k=1, m=2)
    assert context.tables == ["t1"]  # step 1: the table with that column, though no name says so
    assert "t1.c3" in context.columns  # step 2: the column itself
    context = retriever.retrieve("How long is the average surgery waiting time?", k=1, m=2)
    assert context.tables == ["t2"] and "t2.c3" in context.columns
    retriever.close()
