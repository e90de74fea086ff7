"""quote_identifier: the one way SQL text names a table or column, in SQLite and PostgreSQL."""
from __future__ import annotations

import sqlite3

import pytest
import sqlglot
from sqlglot import exp

from reflect_sql.db.identifiers import quote_identifier

DIALECTS = ["sqlite", "postgres"]

# name -> how both dialects write it
QUOTED = {
    "plain": '"plain"',
    "with space": '"with space"',
    'we"ird': '"we""ird"',
    '"': '""""',
    'a""b': '"a""""b"',
    "café": '"café"',
    "ünïcode_x": '"ünïcode_x"',
    "列名": '"列名"',
    "order": '"order"',
    "select": '"select"',
    "MixedCase": '"MixedCase"',
    "1st": '"1st"',
    "it's": '"it\'s"',
    "a.b": '"a.b"',
    "": '""',
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", list(QUOTED))
def test_every_name_is_quoted_and_an_embedded_quote_doubled(name, dialect):
    assert quote_identifier(name, dialect) == QUOTED[name]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", [n for n in QUOTED if n])
def test_the_quoted_name_reads_back_as_the_same_identifier(name, dialect):
    tree = sqlglot.parse_one(f"SELECT {quote_identifier(name, dialect)} FROM t", read=dialect)
    assert tree.find(exp.Column).name == name


@pytest.mark.parametrize("name", [n for n in QUOTED if n])
def test_sqlite_creates_and_reads_the_exact_name(name):
    conn = sqlite3.connect(":memory:")
    try:
        q = quote_identifier(name, "sqlite")
        conn.execute(f"CREATE TABLE {q} ({q} INTEGER)")
        conn.execute(f"INSERT INTO {q} ({q}) VALUES (7)")
        assert conn.execute(f"SELECT {q} FROM {q}").fetchall() == [(7,)]
        assert [r[1] for r in conn.execute(f"PRAGMA table_info({q})")] == [name]
    finally:
        conn.close()


# Schema text for a model: plain names (any script, underscores, no leading digit) stay bare.
BARE = ["plain", "snake_case", "_lead", "café", "ünïcode_x", "列名", "order", "MixedCase", "a1"]
NEEDS_QUOTES = {"with space": '"with space"', 'we"ird': '"we""ird"', "1st": '"1st"', "a-b": '"a-b"',
                "a.b": '"a.b"', "": '""'}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", BARE)
def test_only_if_needed_leaves_plain_names_bare(name, dialect):
    assert quote_identifier(name, dialect, only_if_needed=True) == name


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", list(NEEDS_QUOTES))
def test_only_if_needed_quotes_the_rest(name, dialect):
    assert quote_identifier(name, dialect, only_if_needed=True) == NEEDS_QUOTES[name]


def test_the_default_dialect_is_sqlite():
    assert quote_identifier('x"y') == quote_identifier('x"y', "sqlite") == '"x""y"'
