import json

import pytest
import sqlglot

from reflect_sql.experiments.metrics import bird_match
from reflect_sql.optimize.perturb import KINDS, perturb, perturbations, variants

SCHEMA = {
    "superhero": {"id": "INTEGER", "superhero_name": "TEXT", "race_id": "INTEGER", "gender_id": "INTEGER", "height_cm": "INTEGER"},
    "race": {"id": "INTEGER", "race": "TEXT"},
}


def test_each_mistake_on_a_known_query():
    gold = ("SELECT CAST(SUM(CASE WHEN T2.race = 'Human' THEN 1 ELSE 0 END) AS REAL) * 100 / COUNT(T1.id) "
            "FROM superhero AS T1 INNER JOIN race AS T2 ON T1.race_id = T2.id WHERE T1.height_cm > 180 AND T1.gender_id = 1")
    out = perturbations(gold, SCHEMA)
    assert set(out) == set(KINDS)
    assert "T1.gender_id = T2.id" in out["wrong_join"]  # same-typed key column of the same table
    assert "T1.height_cm > 180" not in out["dropped_filter"] and "T1.gender_id = 1" in out["dropped_filter"]
    assert "AVG(CASE" in out["wrong_aggregation"]
    assert "CAST" not in out["integer_division"] and "/ COUNT(T1.id)" in out["integer_division"]


def test_inapplicable_mistakes_give_none():
    assert perturb("SELECT name FROM t", "dropped_filter") is None
    assert perturb("SELECT name FROM t WHERE x = 1", "wrong_aggregation") is None
    assert perturb("SELECT a / b FROM t", "integer_division") is None
    assert perturb("SELECT * FROM a JOIN b ON a.x = b.y", "wrong_join") is None  # no schema: no columns to choose
    assert perturb("SELECT COUNT(*) FROM t", "wrong_aggregation") is None
    assert perturb("SELECT 1.0 * a / b FROM t", "integer_division") == "SELECT 1 * a / b FROM t"


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="one SQL statement"):
        perturb("SELECT 1; SELECT 2", "dropped_filter")
    with pytest.raises(ValueError, match="unknown perturbation"):
        perturb("SELECT 1", "typo")


def test_count_variants_in_order():
    found = variants("SELECT COUNT(id) FROM t WHERE x = 1", "wrong_aggregation")
    assert found == ["SELECT COUNT(DISTINCT id) FROM t WHERE x = 1", "SELECT SUM(id) FROM t WHERE x = 1"]
    assert variants("SELECT COUNT(DISTINCT id) FROM t", "wrong_aggregation") == ["SELECT COUNT(id) FROM t"]


def test_on_bird_perturbed_sql_parses_differs_and_mostly_changes_the_result(benchmarks_dir):
    from reflect_sql.db.connect import open_engine

    bird = benchmarks_dir / "bird"
    questions = json.loads((bird / "dev.json").read_text())[::4]  # every 4th: ~72 questions, both databases
    schemas = {}
    applied = {k: 0 for k in KINDS}
    differs = {k: 0 for k in KINDS}
    for q in questions:
        db = bird / "dev_databases" / q["db_id"] / f"{q['db_id']}.sqlite"
        if q["db_id"] not in schemas:
            with open_engine(db) as engine:
                schemas[q["db_id"]] = engine.introspect()
        for kind, sql in perturbations(q["SQL"], schemas[q["db_id"]]).items():
            assert len(sqlglot.parse(sql, read="sqlite")) == 1
            assert sql != q["SQL"]
            applied[kind] += 1
            differs[kind] += not bird_match(sql, q["SQL"], db, timeout_s=10).correct
    assert applied["wrong_join"] > 40 and applied["dropped_filter"] > 40 and applied["wrong_aggregation"] > 10
    assert applied["integer_division"] >= 2
    # A dropped filter or a moved join key can leave a result unchanged on a given database; most do not.
    for kind in ("wrong_join", "dropped_filter", "integer_division"):
        assert differs[kind] / applied[kind] > 0.7, (kind, differs[kind], applied[kind])
    total = sum(applied.values())
    assert sum(differs.values()) / total > 0.7
