"""The sqlglot AST gate on its own: what it admits, what it refuses and why, what is a syntax error."""
from __future__ import annotations

import pytest
from sqlglot import exp

from reflect_sql.db.base import QueryRefused, SQLSyntaxError
from reflect_sql.db.guard import denied_function, guard_sql

DIALECTS = ["sqlite", "postgres"]

ADMITTED = [
    "SELECT 1",
    "SELECT 1;",
    "SELECT 1; -- a trailing comment is not a second statement",
    "select id, full_name from superhero where id < 10 order by id limit 3",
    "SELECT a FROM t UNION SELECT b FROM u",
    "SELECT a FROM t INTERSECT SELECT b FROM u",
    "SELECT a FROM t EXCEPT SELECT b FROM u",
    "(SELECT 1)",
    "WITH x AS (SELECT id FROM superhero) SELECT count(*) FROM x",
    "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 5) SELECT n FROM c",
    # Hostile-looking words in literals and comments are data, not statements.
    "SELECT 'DROP TABLE superhero; DELETE FROM x' AS note",
    "SELECT id FROM superhero /* DROP TABLE superhero */ WHERE full_name LIKE '%INSERT%'",
    "SELECT id -- ; DELETE FROM superhero\nFROM superhero",
    # Names that merely contain a denied function's name are columns, not calls.
    "SELECT t.nextval, t.pg_sleep FROM t",
    "SELECT CAST(SUM(CASE WHEN a > 1 THEN 1 ELSE 0 END) AS REAL) * 100 / COUNT(*) FROM t",
    "SELECT current_setting('TimeZone')",
]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("sql", ADMITTED)
def test_read_only_queries_pass(sql, dialect):
    tree = guard_sql(sql, dialect)
    assert isinstance(tree, exp.Query)


@pytest.mark.parametrize(
    "sql, reason",
    [
        ("DELETE FROM t", "DELETE writes data"),
        ("WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d", "found inside the query"),
        ("SELECT * INTO t2 FROM t", "SELECT INTO"),
        ("SELECT 1; SELECT 2", "2 statements"),
        ("SELECT * FROM t FOR SHARE", "row locks"),
        ("SELECT pg_catalog.pg_read_file('/etc/passwd')", "pg_read_file()"),
        ('SELECT "pg_sleep"(1)', "pg_sleep()"),
        ("SELECT * FROM t WHERE a IN (SELECT nextval('s'))", "nextval()"),
        ("SELECT lo_export(1, '/tmp/x')", "lo_export()"),
        ("SELECT * FROM dblink_exec('x')", "dblink_exec()"),
        ("VACUUM", "VACUUM is not allowed"),
        ("PRAGMA table_info(t)", "PRAGMA"),
        ("CHECKPOINT", "only SELECT queries"),
    ],
)
def test_refusals_say_why(sql, reason):
    with pytest.raises(QueryRefused) as caught:
        guard_sql(sql, "postgres")
    assert reason in caught.value.message
    assert caught.value.kind == "refused" and caught.value.sql == sql


def test_statements_of_another_dialect_are_refused_not_handed_back_as_syntax_errors():
    # sqlglot's SQLite dialect cannot parse LOCK or DO; read as PostgreSQL they are statements.
    with pytest.raises(QueryRefused, match="LOCK"):
        guard_sql("LOCK TABLE t IN ACCESS EXCLUSIVE MODE", "sqlite")
    with pytest.raises(QueryRefused, match="PRAGMA"):
        guard_sql("PRAGMA writable_schema = ON", "postgres")


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("sql", ["SELEC 1", "SELECT 'unterminated", "SELECT (1", "", "  ;  ", "-- only a comment"])
def test_malformed_sql_is_a_syntax_error(sql, dialect):
    with pytest.raises(SQLSyntaxError) as caught:
        guard_sql(sql, dialect)
    assert caught.value.kind == "syntax"


def test_non_string_input_is_a_clear_error():
    with pytest.raises(SQLSyntaxError, match="must be a string"):
        guard_sql(None, "sqlite")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name, denied",
    [("pg_sleep_for", True), ("LO_IMPORT", True), ("set_config", True), ("txid_current", True),
     ("load_extension", True), ("current_setting", False), ("count", False), ("lower", False), ("strftime", False)],
)
def test_denied_function_names(name, denied):
    assert denied_function(name) is denied
