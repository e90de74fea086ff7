"""Pruning by budget (issue 19): a schema that fits is passed whole; beyond the budget k and m
prune, then the lowest-scored columns go; key and join columns always stay."""
from __future__ import annotations

import sqlite3

import pytest

from reflect_sql.kb.build import build_kb
from reflect_sql.kb.context import TABLES_AND_COLUMNS, TABLES_ONLY, WHOLE_DATABASE, estimated_tokens
from reflect_sql.kb.retrieve import Retriever
from reflect_sql.settings import Settings


@pytest.fixture()
def school_kb(school_db, tmp_path):
    build_kb(str(school_db), tmp_path / "kb", Settings())
    return tmp_path / "kb"


def _retriever(kb_dir, budget: int) -> Retriever:
    return Retriever(kb_dir, Settings(context_budget_tokens=budget))


def test_a_tiny_schema_is_passed_whole(school_kb, school_db):
    retriever = _retriever(school_kb, Settings().context_budget_tokens)
    context = retriever.retrieve("Which students take Thermodynamics?", k=1, m=1)
    every = {f"{t}.{c}" for t, c in sqlite3.connect(school_db).execute(
        "SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p WHERE m.type = 'table'")}
    assert context.pruned == WHOLE_DATABASE
    assert set(context.columns) == every  # k=1 and m=1 asked for far less
    assert "the whole database" in context.render()
    assert context.to_json()["pruned"] == WHOLE_DATABASE
    retriever.close()


def test_the_paper_pruning_when_the_budget_is_off(school_kb):
    retriever = _retriever(school_kb, 0)
    context = retriever.retrieve("Which students take Thermodynamics?", k=1, m=1)
    assert context.pruned == TABLES_AND_COLUMNS and len(context.tables) == 1
    retriever.close()


def test_selected_tables_whole_when_only_they_fit(school_kb):
    question = "Which students take Thermodynamics?"
    whole = _retriever(school_kb, 100_000).retrieve(question, k=2)
    selected = _retriever(school_kb, 0).retrieve(question, k=2)
    assert set(selected.tables) < set(whole.tables)  # the school has a table this question does not need
    budget = estimated_tokens(whole.render()) - 1  # just short of the whole database
    context = _retriever(school_kb, budget).retrieve(question, k=2)
    assert context.pruned == TABLES_ONLY
    assert context.tables == selected.tables
    assert len(context.columns) == sum(t.total_columns for t in context.entries) > len(selected.columns)
    assert estimated_tokens(context.render()) <= budget


def _wide_db(path):
    con = sqlite3.connect(path)
    columns = ", ".join(f"measure_{i} REAL" for i in range(120))
    con.execute("CREATE TABLE station (station_id INTEGER PRIMARY KEY, station_name TEXT, city TEXT)")
    con.execute(f"CREATE TABLE reading (reading_id INTEGER PRIMARY KEY, station_id INTEGER REFERENCES station(station_id), "
                f"taken_on TEXT, rainfall_mm REAL, {columns})")
    con.execute("INSERT INTO station VALUES (1, 'Harbour Point', 'Hue'), (2, 'Hill Top', 'Da Lat')")
    values = ", ".join(["0.5"] * 120)
    con.execute(f"INSERT INTO reading VALUES (1, 1, '2025-01-01', 3.2, {values})")
    con.commit()
    con.close()
    return path


def test_the_budget_is_respected_on_a_wide_schema(tmp_path):
    db = _wide_db(tmp_path / "wide.sqlite")
    build_kb(str(db), tmp_path / "kb", Settings())
    budget = 400
    retriever = _retriever(tmp_path / "kb", budget)
    # m wide enough that k and m alone would overrun the budget: the trim must do the rest.
    context = retriever.retrieve("Which rainfall_mm readings were taken at the Harbour Point station?", k=2, m=60)
    assert context.pruned == TABLES_AND_COLUMNS
    assert estimated_tokens(context.render()) <= budget
    assert {"station", "reading"} <= set(context.tables)
    # The join keys stay whatever their score; the named column survives the trim.
    assert {"reading.station_id", "station.station_id", "reading.rainfall_mm"} <= set(context.columns)
    unbounded = _retriever(tmp_path / "kb", 0).retrieve("Which rainfall_mm readings were taken at the Harbour Point station?", k=2, m=60)
    assert estimated_tokens(unbounded.render()) > budget  # so the trim, not k and m, met the budget
    retriever.close()
