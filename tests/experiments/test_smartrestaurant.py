"""The SmartRestaurant ("Aria") scenario: deterministic data, gold SQL that agrees on both engines,
and question set, descriptions and glossary that match the schema.

The database is generated once per session (seed 0, the seed the gold answers are checked for)
and, when REFLECT_SQL_TEST_PG_URL is set, loaded once into a PostgreSQL schema of its own.
"""
from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import os
import re
import sqlite3
import time
from decimal import Decimal
from pathlib import Path

import pytest
import sqlglot
from sqlglot import exp

from reflect_sql.db.connect import open_engine
from reflect_sql.errors import UserError
from reflect_sql.experiments.smartrestaurant import DB_ID, DESCRIPTIONS_DIR, GLOSSARY, QUESTIONS
from reflect_sql.experiments.smartrestaurant.compare import is_ordered, normalise_rows, tie_probe
from reflect_sql.experiments.smartrestaurant.demo_db import ensure_demo_db
from reflect_sql.experiments.smartrestaurant.generator import TABLE_ORDER, write_sqlite
from reflect_sql.experiments.smartrestaurant.menu import REFERENCE_NOW

QUESTION_LIST = json.loads(QUESTIONS.read_text(encoding="utf-8"))
BIRD_KEYS = {"question_id", "db_id", "question", "evidence", "SQL", "difficulty"}
TRAPS = {"cancelled", "integer_division", "nulls", "left_join", "group_by_grain"}
MAX_ROWS = 100_000


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def sr_db(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("smartrestaurant") / "smartrestaurant.sqlite"
    started = time.perf_counter()
    counts = write_sqlite(path, seed=0)
    return {"path": path, "counts": counts, "seconds": time.perf_counter() - started}


@pytest.fixture(scope="session")
def sqlite_engine(sr_db):
    engine = open_engine(sr_db["path"])
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def pg_engine(pg_url, pg_reader, sr_db):
    import psycopg
    from psycopg import sql

    from reflect_sql.db.loader import schema_url
    from reflect_sql.experiments.smartrestaurant.postgres_load import load_postgres

    schema = f"test_{os.getpid()}_smartrestaurant"
    url = schema_url(pg_url, schema)
    counts = load_postgres(sr_db["path"], url)
    assert counts == sr_db["counts"]
    engine = open_engine(pg_reader(url))
    yield engine
    engine.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def rows_of(engine, sql_text: str) -> list[tuple]:
    result = engine.execute(sql_text, max_rows=MAX_ROWS)
    assert not result.truncated
    return normalise_rows(result.rows, is_ordered(sql_text))


# --------------------------------------------------------------------------- the generator


def test_generation_is_fast_and_about_20k_orders(sr_db):
    counts = sr_db["counts"]
    assert list(counts) == TABLE_ORDER
    assert 15_000 <= counts["orders"] <= 25_000
    assert counts["order_items"] > counts["orders"] and counts["kitchen_tickets"] > counts["orders"]
    # Generous: two busy cores can slow it well beyond the ~8 s it takes on an idle machine.
    assert sr_db["seconds"] < 60


@pytest.mark.slow  # two more full generations; `make test` runs it, `make test-fast` skips it
def test_same_seed_gives_identical_bytes_and_another_seed_does_not(sr_db, tmp_path):
    again = tmp_path / "again.sqlite"
    other = tmp_path / "other.sqlite"
    assert write_sqlite(again, seed=0) == sr_db["counts"]
    write_sqlite(other, seed=1)
    assert sha256(again) == sha256(sr_db["path"])
    assert sha256(other) != sha256(sr_db["path"])
    assert not list(tmp_path.glob(".*.tmp")), "temporary files must not be left behind"


def test_the_data_stops_at_the_pinned_now(sqlite_engine):
    assert rows_of(sqlite_engine, "SELECT value FROM app_meta WHERE key = 'reference_now'") == [(REFERENCE_NOW,)]
    latest = rows_of(sqlite_engine, """SELECT MAX(t) FROM (
        SELECT MAX(opened_at) AS t FROM orders UNION ALL SELECT MAX(closed_at) FROM orders
        UNION ALL SELECT MAX(fired_at) FROM kitchen_tickets UNION ALL SELECT MAX(ready_at) FROM kitchen_tickets
        UNION ALL SELECT MAX(served_at) FROM kitchen_tickets UNION ALL SELECT MAX(logged_at) FROM inventory_logs
        UNION ALL SELECT MAX(joined_at) FROM customers) AS x""")
    assert latest[0][0] <= REFERENCE_NOW
    # Open orders are all from today's lunch, have no closing time and some unserved tickets.
    open_orders = rows_of(sqlite_engine, """SELECT MIN(opened_at), COUNT(*), SUM(CASE WHEN closed_at IS NULL
        THEN 0 ELSE 1 END) FROM orders WHERE status = 'IN_PROGRESS'""")
    assert open_orders[0][0] >= REFERENCE_NOW[:10] and open_orders[0][1] >= 10 and open_orders[0][2] == 0
    assert rows_of(sqlite_engine, """SELECT COUNT(*) FROM orders WHERE status <> 'IN_PROGRESS'
        AND closed_at IS NULL""") == [(0.0,)]


def test_the_data_has_the_shape_of_a_restaurant(sqlite_engine):
    by_hour = dict(rows_of(sqlite_engine, """SELECT SUBSTR(opened_at, 12, 2), COUNT(*) FROM orders GROUP BY 1"""))
    # Lunch and dinner peaks, a quiet afternoon between them.
    assert by_hour["12"] > 2 * by_hour["10"] and by_hour["19"] > 1.5 * by_hour["17"]
    assert "15" not in by_hour and by_hour["11"] + by_hour["12"] > by_hour["13"] * 2
    status = dict(rows_of(sqlite_engine, "SELECT status, COUNT(*) FROM orders GROUP BY status"))
    assert 0.02 < status["CANCELLED"] / sum(status.values()) < 0.08
    # Combos come with their parts, priced on the combo line.
    parts = rows_of(sqlite_engine, """SELECT COUNT(*), SUM(child.unit_price) FROM order_items AS child
        JOIN order_items AS parent ON parent.id = child.parent_item_id
        JOIN menu_items AS m ON m.id = parent.menu_item_id WHERE m.is_combo = 1""")
    assert parts[0][0] > 1000 and parts[0][1] == 0
    # Returning customers: a few regulars, many occasional guests.
    visits = rows_of(sqlite_engine, """SELECT MAX(n), SUM(CASE WHEN n >= 2 THEN 1 ELSE 0 END) FROM (
        SELECT COUNT(*) AS n FROM orders WHERE customer_id IS NOT NULL GROUP BY customer_id) AS v""")
    assert visits[0][0] >= 20 and visits[0][1] >= 500
    names = {r[0] for r in rows_of(sqlite_engine, "SELECT name FROM menu_items")}
    assert {"Trà sữa nướng", "Lẩu Thái", "Phở bò", "Bún chả", "Gỏi cuốn"} <= names


def test_the_papers_live_questions_have_their_scripted_answers(sqlite_engine):
    """Table 5's spring rolls (fired 12:17) and table 12's hotpot (fired 11:58) are written into the data."""
    gold = {q["question"]: q["SQL"] for q in QUESTION_LIST}
    assert rows_of(sqlite_engine, gold["How long has table 5 been waiting for its appetizer, in minutes?"]) == [(23.0,)]
    assert rows_of(sqlite_engine, gold["Which table has been waiting longest for food in the current lunch shift?"]) \
        == [(12.0,)]
    assert rows_of(sqlite_engine, gold["Which dish has the highest re-order rate this month?"])[0][0] == "Trà sữa nướng"
    assert rows_of(sqlite_engine, gold["Which menu items have never been ordered?"]) == [("Bánh flan matcha",)]


def test_ensure_demo_db_keeps_a_current_file_and_refuses_a_foreign_one(sr_db, tmp_path):
    from reflect_sql.cli import main

    copy = tmp_path / "demo.sqlite"
    copy.write_bytes(sr_db["path"].read_bytes())
    before = copy.stat().st_mtime_ns
    assert ensure_demo_db(copy, seed=0).built is False
    assert main(["demo-db", "create", "--out", str(copy), "--if-missing"]) == 0
    assert copy.stat().st_mtime_ns == before
    foreign = tmp_path / "notes.sqlite"
    foreign.write_text("not a database")
    with pytest.raises(UserError, match="not a SmartRestaurant database"):
        ensure_demo_db(foreign)
    assert main(["demo-db", "create", "--out", str(foreign), "--if-missing"]) == 2
    assert foreign.read_text() == "not a database"


# --------------------------------------------------------------------------- gold SQL


@pytest.mark.parametrize("q", QUESTION_LIST, ids=lambda q: f"q{q['question_id']}")
def test_gold_sql_has_one_non_empty_answer_on_sqlite(q, sqlite_engine):
    rows = rows_of(sqlite_engine, q["SQL"])
    assert rows, "the gold answer is empty"
    assert any(v is not None for row in rows for v in row), "the gold answer is all NULL"
    probe = tie_probe(q["SQL"])
    if probe is not None:
        keys = sqlite_engine.execute(probe[0]).rows
        k = probe[1]
        assert len(keys) <= k or keys[k - 1] != keys[k], f"ORDER BY ... LIMIT {k} cuts through a tie: {keys}"


@pytest.mark.postgres
@pytest.mark.parametrize("q", QUESTION_LIST, ids=lambda q: f"q{q['question_id']}")
def test_gold_sql_gives_the_same_rows_on_postgres(q, sqlite_engine, pg_engine):
    assert rows_of(pg_engine, q["SQL"]) == rows_of(sqlite_engine, q["SQL"])


@pytest.mark.postgres
def test_both_engines_hold_the_same_schema(sqlite_engine, pg_engine):
    lite, pg = sqlite_engine.introspect(), pg_engine.introspect()
    assert sorted(t.name for t in lite.tables) == sorted(t.name for t in pg.tables) == sorted(TABLE_ORDER)
    for table in lite.tables:
        other = pg.table(table.name)
        assert [c.name for c in table.columns] == [c.name for c in other.columns], table.name
        assert table.row_count == other.row_count, table.name
    fks = lambda s: sorted((f.table, tuple(f.columns), f.ref_table, tuple(f.ref_columns)) for f in s.foreign_keys)
    assert fks(lite) == fks(pg) and len(fks(lite)) == 7


def test_normalising_makes_engine_types_meet():
    lite = [(5, 2.5, "2025-06-18 12:40:00", 1, None)]
    pg = [(Decimal("5"), Decimal("2.50"), dt.datetime(2025, 6, 18, 12, 40), True, None)]
    assert normalise_rows(lite, ordered=True) == normalise_rows(pg, ordered=True)
    assert normalise_rows([(1,), (2,)], ordered=False) == normalise_rows([(2,), (Decimal(1),)], ordered=False)
    assert normalise_rows([(1,), (2,)], ordered=True) != normalise_rows([(2,), (1,)], ordered=True)
    assert normalise_rows([(dt.date(2025, 5, 3),)], True) == [("2025-05-03",)]


def test_tie_probe_finds_a_limit_that_cuts_through_a_tie(sqlite_engine):
    tied = tie_probe("SELECT table_no FROM tables ORDER BY seats LIMIT 1")  # many two-seat tables
    rows = sqlite_engine.execute(tied[0]).rows
    assert tied[1] == 1 and rows[0] == rows[1]
    unique = tie_probe("SELECT table_no, seats AS s FROM tables ORDER BY s DESC LIMIT 1")  # one 12-seat room
    rows = sqlite_engine.execute(unique[0]).rows
    assert rows[0] != rows[1]
    assert tie_probe("SELECT COUNT(*) FROM tables") is None


# --------------------------------------------------------------------------- the question set


def test_question_set_is_bird_dev_format_and_bilingual():
    assert len(QUESTION_LIST) >= 80
    assert [q["question_id"] for q in QUESTION_LIST] == list(range(len(QUESTION_LIST)))
    for q in QUESTION_LIST:
        assert BIRD_KEYS <= set(q), q["question_id"]
        assert q["db_id"] == DB_ID and q["difficulty"] in {"simple", "moderate", "challenging"}
        assert q["question"].strip() and q["SQL"].strip() and q["lang"] in {"en", "vi"}
    english = [q for q in QUESTION_LIST if q["lang"] == "en"]
    vietnamese = [q for q in QUESTION_LIST if q["lang"] == "vi"]
    assert len(english) >= 60 and len(vietnamese) >= 20
    # Vietnamese questions are written in Vietnamese, with its diacritics, not English in disguise.
    assert all(sum(ch.isalpha() and not ch.isascii() for ch in q["question"]) >= 3 for q in vietnamese)
    assert len({q["question"] for q in QUESTION_LIST}) == len(QUESTION_LIST)
    assert {q["difficulty"] for q in english} == {"simple", "moderate", "challenging"}


def test_question_set_holds_the_papers_examples_and_traps():
    texts = [q["question"].lower() for q in QUESTION_LIST]
    for needle in ("highest re-order rate", "table 5", "last night's dinner-shift revenue per category",
                   "waiting longest for food in the current lunch shift"):
        assert any(needle in t for t in texts), needle
    seen = {t for q in QUESTION_LIST for t in q.get("traps", [])}
    assert TRAPS <= seen
    sql_text = " ".join(q["SQL"] for q in QUESTION_LIST)
    assert "<> 'CANCELLED'" in sql_text and "100.0 *" in sql_text and "LEFT JOIN" in sql_text


def test_questions_cover_every_table(sqlite_engine):
    used = set()
    for q in QUESTION_LIST:
        tree = sqlglot.parse_one(q["SQL"], read="sqlite")
        ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
        used |= {t.name for t in tree.find_all(exp.Table)} - ctes
    assert used == {t.name for t in sqlite_engine.introspect().tables}


# --------------------------------------------------------------------------- descriptions and glossary


def test_description_files_cover_every_column(sr_db):
    from reflect_sql.kb.sources import DESCRIPTION_FIELDS, read_descriptions

    conn = sqlite3.connect(sr_db["path"])
    try:
        schema = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")] for t in TABLE_ORDER}
    finally:
        conn.close()
    assert sorted(p.stem for p in DESCRIPTIONS_DIR.glob("*.csv")) == sorted(schema)
    for table, columns in schema.items():
        path = DESCRIPTIONS_DIR / f"{table}.csv"
        with path.open(encoding="utf-8", newline="") as f:
            header, *rows = list(csv.reader(f))
        assert tuple(header) == DESCRIPTION_FIELDS, table
        assert [r[0] for r in rows] == columns, table
        assert all(len(r) == 5 and r[1] and r[2] and r[3] for r in rows), table
    # The knowledge base reads the folder as it reads BIRD's.
    notes = read_descriptions(DESCRIPTIONS_DIR)
    assert {t: list(cols) for t, cols in notes.items()} == schema


def test_glossary_aliases_and_ids_point_at_the_data(sqlite_engine):
    from reflect_sql.kb.sources import read_glossary

    glossary = read_glossary(GLOSSARY)
    assert len(glossary.terms) >= 20 and len(glossary.aliases) >= 50
    stored = set()
    for table in sqlite_engine.introspect().tables:
        for column in table.columns:
            if column.type.upper() == "TEXT" and not column.name.endswith(("_at", "_on")):
                stored |= {r[0] for r in sqlite_engine.execute(
                    f"SELECT DISTINCT {column.name} FROM {table.name}", max_rows=MAX_ROWS).rows}
    missing = {alias: value for alias, value in glossary.aliases.items() if value not in stored}
    assert not missing, f"aliases whose value is nowhere in the database: {missing}"
    names = dict(sqlite_engine.execute("SELECT id, name FROM menu_items").rows)
    categories = dict(sqlite_engine.execute("SELECT id, name FROM categories").rows)
    checked = 0
    for term, meaning in glossary.terms.items():
        for item_id in re.findall(r"menu_items\.id = (\d+)", meaning):
            assert names[int(item_id)].startswith(term), (term, item_id)
            checked += 1
        for cat_id in re.findall(r"categories\.id = (\d+)", meaning):
            assert categories[int(cat_id)] in meaning, (term, cat_id)
    assert checked >= 5
    assert REFERENCE_NOW in glossary.terms["now"]


# --------------------------------------------------------------------------- as a BIRD dataset

def test_the_scenario_as_a_bird_dataset_root_with_its_twins(sr_db, tmp_path, capsys):
    from reflect_sql.cli import main
    from reflect_sql.experiments.datasets import load_dataset
    from reflect_sql.experiments.smartrestaurant.bird_layout import twin_pairs

    db_dir = tmp_path / "twins" / "dev_databases" / DB_ID
    db_dir.mkdir(parents=True)
    (db_dir / f"{DB_ID}.sqlite").write_bytes(sr_db["path"].read_bytes())  # kept: same seed
    assert main(["demo-db", "create", "--dataset", str(tmp_path / "twins"), "--twins"]) == 0
    entries = json.loads((tmp_path / "twins" / "dev.json").read_text(encoding="utf-8"))
    everything = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    assert len(entries) == 2 * sum(e["lang"] == "vi" for e in everything) == 2 * len(twin_pairs(everything))
    for english, vietnamese in zip(entries[::2], entries[1::2]):
        assert (english["lang"], vietnamese["lang"]) == ("en", "vi")
        assert " ".join(english["SQL"].split()) == " ".join(vietnamese["SQL"].split())
    questions = load_dataset("bird", tmp_path / "twins")
    assert len(questions) == len(entries)
    q = questions[0]
    assert q.db_path.is_file() and q.glossary == db_dir / "glossary.yaml"
    assert q.glossary.read_text(encoding="utf-8") == GLOSSARY.read_text(encoding="utf-8")
    assert sorted(p.name for p in q.descriptions_dir.iterdir()) == sorted(p.name for p in DESCRIPTIONS_DIR.iterdir())

    assert main(["demo-db", "create", "--twins"]) == 2
    assert main(["demo-db", "create"]) == 2
    assert "--dataset" in capsys.readouterr().err


def test_language_report_splits_ex_by_language_and_counts_twin_agreement(tmp_path, capsys):
    from reflect_sql.experiments.smartrestaurant.bird_layout import twin_pairs
    from reflect_sql.experiments.smartrestaurant.language_report import main

    pairs = twin_pairs(json.loads(QUESTIONS.read_text(encoding="utf-8")))[:2]
    run = tmp_path / "run"
    run.mkdir()
    rows = []
    for i, (en, vi) in enumerate(pairs):  # pair 0: both right; pair 1: only the English one
        for entry, correct in ((en, True), (vi, i == 0)):
            rows.append({"question_id": entry["question_id"], "difficulty": entry["difficulty"], "correct": correct,
                         "cost": {"lm_calls": 1 if entry["lang"] == "en" else 2, "prompt_tokens": 100, "seconds": 10.0}})
    (run / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    assert main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "| run | en | 2 | 100.0 (2/2) |" in out and "| run | vi | 2 | 50.0 (1/2) |" in out
    assert "| 2.00 | 100 | 10.0 |" in out  # the Vietnamese questions' extra rendering call
    assert "2 twin pairs: both 1, en only 1, vi only 0, neither 0" in out
