"""Execution accuracy rules (BIRD set equality, Spider multiset/ORDER BY), timeouts, recall, cost."""
from __future__ import annotations

import sqlite3
import time

import pytest

from reflect_sql.experiments.metrics import (
    accuracy_table,
    aggregate_cost,
    bird_match,
    gold_tables_and_columns,
    has_top_level_order_by,
    retrieval_recall,
    spider_match,
)

SLOW = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500000000) SELECT count(*) FROM c"


@pytest.fixture()
def db(tiny_bird):
    return tiny_bird / "dev_databases" / "shop" / "shop.sqlite"


def test_bird_ignores_order_and_duplicates(db):
    gold = "SELECT name FROM item WHERE kind = 'fruit'"
    assert bird_match("SELECT name FROM item WHERE kind = 'fruit' ORDER BY name DESC", gold, db).correct
    dup = "SELECT name FROM item WHERE kind = 'fruit' UNION ALL SELECT name FROM item WHERE kind = 'fruit'"
    assert bird_match(dup, gold, db).correct


def test_bird_wrong_rows_columns_and_types_are_wrong(db):
    gold = "SELECT name FROM item WHERE kind = 'fruit'"
    assert bird_match("SELECT name FROM item", gold, db).status == "wrong"
    assert not bird_match("SELECT name, kind FROM item WHERE kind = 'fruit'", gold, db).correct
    # Python compares 1 == 1.0 as equal, as the official set comparison does; '1' is not 1.
    assert bird_match("SELECT 1.0", "SELECT 1", db).correct
    assert not bird_match("SELECT '1'", "SELECT 1", db).correct


def test_errors_missing_and_blank_are_wrong(db):
    gold = "SELECT name FROM item"
    m = bird_match("SELECT nope FROM item", gold, db)
    assert (m.correct, m.status) == (False, "pred_error") and "nope" in m.detail
    assert bird_match("SELECT 1; SELECT 2", "SELECT 1", db).status == "pred_error"
    assert bird_match(None, gold, db).status == "missing"
    assert bird_match("   ", "SELECT name FROM item WHERE 0", db).status == "empty"
    assert bird_match("SELECT 1", "SELEC broken", db).status == "gold_error"


def test_writes_fail_on_the_read_only_connection(db):
    m = bird_match("DELETE FROM item", "SELECT name FROM item WHERE 0", db)
    assert m.status == "pred_error"
    assert sqlite3.connect(db).execute("SELECT count(*) FROM item").fetchone()[0] == 4


def test_timeout_counts_as_wrong_and_stops_promptly(db):
    started = time.monotonic()
    m = bird_match(SLOW, "SELECT 1", db, timeout_s=0.3)
    assert (m.correct, m.status) == (False, "pred_timeout")
    assert time.monotonic() - started < 3
    assert spider_match("SELECT 1", SLOW, db, timeout_s=0.3).status == "gold_timeout"


def test_spider_multiset_without_order_by(db):
    gold = "SELECT kind FROM item"  # fruit, fruit, veg, veg
    assert spider_match("SELECT kind FROM item ORDER BY kind DESC", gold, db).correct
    # Duplicates matter, but by default DISTINCT is removed from both queries, as officially.
    assert not spider_match("SELECT DISTINCT kind FROM item", gold, db, keep_distinct=True).correct
    assert spider_match("SELECT DISTINCT kind FROM item", gold, db).correct
    assert not spider_match("SELECT kind FROM item GROUP BY kind", gold, db).correct
    assert bird_match("SELECT DISTINCT kind FROM item", gold, db).correct  # ...but not for BIRD


def test_spider_order_matters_with_order_by(db):
    gold = "SELECT name FROM item ORDER BY price"
    assert spider_match("SELECT name FROM item ORDER BY price ASC", gold, db).correct
    assert not spider_match("SELECT name FROM item ORDER BY price DESC", gold, db).correct
    assert bird_match("SELECT name FROM item ORDER BY price DESC", gold, db).correct
    sub = "SELECT name FROM (SELECT name, price FROM item ORDER BY price LIMIT 3)"
    assert not has_top_level_order_by(sub)
    assert has_top_level_order_by("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1")
    assert has_top_level_order_by(gold)


def test_accuracy_table_counts_and_percentages():
    outcomes = [("simple", True), ("simple", False), ("moderate", True), ("challenging", False), ("simple", True)]
    table = accuracy_table(outcomes)
    assert table == {
        "simple": 66.67, "moderate": 100.0, "challenging": 0.0, "overall": 60.0,
        "counts": {"simple": 3, "moderate": 1, "challenging": 1, "overall": 5},
    }
    assert accuracy_table([(None, True), (None, False)], by_difficulty=False) == {"overall": 50.0, "counts": {"overall": 2}}
    assert accuracy_table([("simple", True)])["challenging"] is None


def test_gold_tables_and_columns_resolves_aliases_and_unqualified_columns():
    schema = {"superhero": {"id": "INTEGER", "superhero_name": "TEXT", "eye_colour_id": "INTEGER"},
              "colour": {"id": "INTEGER", "colour": "TEXT"}, "unused": {"x": "INT"}}
    sql = ("SELECT COUNT(T1.id) FROM superhero AS T1 INNER JOIN colour AS T2 ON T1.eye_colour_id = T2.id "
           "WHERE colour = 'Blue'")
    tables, columns = gold_tables_and_columns(sql, schema)
    assert tables == {"superhero", "colour"}
    assert columns == {"superhero.id", "superhero.eye_colour_id", "colour.id", "colour.colour"}
    recall = retrieval_recall(tables, columns, {"tables": ["SuperHero"], "columns": ["superhero.id", ("colour", "colour")]})
    assert recall == {"table_recall": 0.5, "column_recall": 0.5}


def test_aggregate_cost_totals_and_means():
    costs = [{"lm_calls": 3, "prompt_tokens": 100, "completion_tokens": 10, "seconds": 1.5},
             {"lm_calls": 1, "prompt_tokens": 50, "completion_tokens": 5, "seconds": 0.5}, None]
    out = aggregate_cost(costs)
    assert out["questions"] == 3 and out["lm_calls"] == 4 and out["prompt_tokens"] == 150
    assert out["per_question"]["seconds"] == pytest.approx(2 / 3, abs=1e-3)
    # Records written before the cost ledger have no alone_ keys: they shared nothing they could count.
    assert out["alone_prompt_tokens"] == 150 and out["per_question"]["alone_seconds"] == pytest.approx(2 / 3, abs=1e-3)


def test_ablation_table_counts_shared_cache_hits_at_their_first_cost():
    from reflect_sql.experiments.report import ablation_markdown

    def summary(overall, alone_seconds, hits, unknown=0):
        costs = [{"lm_calls": 4, "prompt_tokens": 10, "completion_tokens": 1, "seconds": 2.0, "lm_seconds": 1.5,
                  "cache_hits": hits, "alone_prompt_tokens": 900, "alone_completion_tokens": 90,
                  "alone_lm_seconds": alone_seconds - 0.5, "alone_seconds": alone_seconds,
                  "cache_hits_of_unknown_cost": unknown}]
        return {"overall": overall, "cost": aggregate_cost(costs)}

    table = ablation_markdown([("single", summary(10.0, 30.0, 0)), ("full", summary(60.0, 180.0, 3, unknown=1))])
    assert "| full | 60.00 | +50.00 | 4.0 | 900 | 90 | 180.0 |" in table
    assert "the 3 calls a response cache shared" in table and "(1 of them at zero" in table
    alone = ablation_markdown([("single", summary(10.0, 30.0, 0))])
    assert "response cache" not in alone
