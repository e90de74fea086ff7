"""The deterministic result checks, one by one, on the results they exist to catch and on clean ones."""
import pytest

from reflect_sql.db.schema import Column, Schema, Table
from reflect_sql.programs.checks import check_result, execution_findings, integer_divisions, render_findings

SCHEMA = Schema("sqlite", [Table("stores", [
    Column("id", "INTEGER", primary_key=True), Column("name", "TEXT"), Column("orders", "INTEGER"),
    Column("returns", "INTEGER"), Column("revenue", "REAL"),
])])


def names(findings):
    return [f.check for f in findings]


@pytest.mark.parametrize("sql", [
    "SELECT returns / orders FROM stores",
    "SELECT SUM(returns) * 100 / SUM(orders) FROM stores",
    "SELECT COUNT(CASE WHEN returns > 0 THEN 1 END) / COUNT(*) FROM stores",
    "SELECT s.returns / s.orders FROM stores AS s",
])
def test_integer_division_is_found(sql):
    assert len(integer_divisions(sql, SCHEMA, "sqlite")) == 1


@pytest.mark.parametrize("sql", [
    "SELECT CAST(returns AS REAL) / orders FROM stores",
    "SELECT returns * 1.0 / orders FROM stores",
    "SELECT 100.0 * returns / orders FROM stores",
    "SELECT revenue / orders FROM stores",
    "SELECT AVG(returns) / orders FROM stores",
    "this is not sql at all (",
])
def test_real_division_is_not_flagged(sql):
    assert integer_divisions(sql, SCHEMA, "sqlite") == []


def test_integer_division_matters_only_when_the_question_asks_for_a_fraction():
    rows = [("North", 0)]
    sql = "SELECT name, returns / orders FROM stores"
    assert "integer_division" in names(check_result("What is the return rate per store?", sql, ["name", "r"], rows, SCHEMA))
    assert "integer_division" in names(check_result("What percentage of orders came back?", sql, ["name", "r"], rows, SCHEMA))
    assert "integer_division" not in names(check_result("How many orders per return for each store?", sql, ["name", "r"], rows, SCHEMA))


def test_schema_may_be_given_lazily_and_is_only_fetched_for_fraction_questions():
    fetched = []

    def schema():
        fetched.append(1)
        return SCHEMA

    check_result("List store names", "SELECT name FROM stores", ["name"], [("a",)], schema=schema)
    assert fetched == []
    findings = check_result("What is the return rate?", "SELECT returns / orders FROM stores", ["r"], [(0,)], schema=schema)
    assert fetched == [1] and "integer_division" in names(findings)


def test_empty_result():
    assert names(check_result("Which stores are in Paris?", "SELECT name FROM stores", ["name"], [])) == ["empty_result"]


def test_all_null_column():
    findings = check_result("List store names and managers", "SELECT name, manager FROM stores", ["name", "manager"],
                            [("a", None), ("b", None)])
    assert names(findings) == ["all_null_column"] and "'manager'" in findings[0].message


def test_division_by_zero_shows_as_null_in_the_dividing_column():
    findings = check_result("Orders per return for each store", "SELECT name, orders / returns AS x FROM stores",
                            ["name", "x"], [("a", 3), ("b", None)], SCHEMA)
    assert names(findings) == ["division_by_zero"] and "1 of 2 rows" in findings[0].message
    # A NULL in a column that does not divide is not a division by zero.
    assert names(check_result("Orders per return for each store", "SELECT name, returns FROM stores",
                              ["name", "x"], [("a", 3), (None, 1)], SCHEMA)) == []


def test_postgres_raises_on_division_by_zero_and_that_becomes_a_finding():
    assert names(execution_findings("division by zero")) == ["division_by_zero"]
    assert execution_findings("no such column: x") == []


def test_duplicates_matter_when_the_question_asks_for_distinct_values():
    rows = [("Coast",), ("Coast",), ("Inland",)]
    assert names(check_result("List the different regions", "SELECT r FROM t", ["r"], rows)) == ["duplicate_rows"]
    assert names(check_result("List the region of every store", "SELECT r FROM t", ["r"], rows)) == []


@pytest.mark.parametrize("question, rows, flagged", [
    ("How many stores are there?", 3, True),
    ("How many stores are there?", 1, False),
    ("How many orders does each store have?", 3, False),
    ("What is the total revenue?", 2, True),
    ("List the top 3 stores by revenue", 5, True),
    ("List the top 3 stores by revenue", 3, False),
    ("List the stores", 50, False),
])
def test_result_far_larger_than_the_question_implies(question, rows, flagged):
    findings = check_result(question, "SELECT x FROM t", ["x"], [(i,) for i in range(rows)])
    assert ("result_too_large" in names(findings)) is flagged
    assert all(f.severity == "warning" for f in findings if f.check == "result_too_large")


def test_a_clean_result_has_no_findings_and_says_so():
    findings = check_result("What is the return rate of each store?",
                            "SELECT name, CAST(returns AS REAL) / orders FROM stores WHERE orders > 0",
                            ["name", "rate"], [("North", 0.3), ("East", 0.25)], SCHEMA)
    assert findings == []
    assert render_findings(findings) == "All deterministic checks passed."


def test_severities_follow_what_gold_answers_can_legitimately_look_like():
    """Empty results and all-NULL columns occur in gold answers (Spider dev: 40 and 6 of 594), so they
    are warnings; the arithmetic and duplicate checks never fire on clean gold, so they are errors."""
    severity = {}
    for question, sql, cols, rows in [
        ("Which stores are in Paris?", "SELECT name FROM stores", ["name"], []),
        ("List names and managers", "SELECT name, m FROM stores", ["name", "m"], [("a", None)]),
        ("What is the return rate?", "SELECT returns / orders FROM stores", ["r"], [(0,)]),
        ("Orders per return", "SELECT orders / returns FROM stores", ["r"], [(1,), (None,)]),
        ("List the distinct names", "SELECT name FROM stores", ["name"], [("a",), ("a",)]),
    ]:
        for f in check_result(question, sql, cols, rows, SCHEMA):
            severity[f.check] = f.severity
    assert severity == {"empty_result": "warning", "all_null_column": "warning", "integer_division": "error",
                        "division_by_zero": "error", "duplicate_rows": "error"}
