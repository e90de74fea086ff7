"""A question placed in time implies a date column it does not name (kb/text.py places_in_time)."""
from __future__ import annotations

import pytest

from reflect_sql.kb.text import places_in_time


@pytest.mark.parametrize("text", ["revenue in May 2025", "orders of December", "last night's dinner", "sales per month",
                                  "in 1999", "since 2024-06-01", "tháng 5/2025", "What did we sell yesterday?",
                                  "during may", "this week's tickets"])
def test_times_are_recognised(text):
    assert places_in_time(text)


@pytest.mark.parametrize("text", ["May I see the students?", "students who may live in Warsaw", "per shift",
                                  "the last order", "table 5", "a price of 2000000 dong", "marching band"])
def test_other_text_is_not_placed_in_time(text):
    assert not places_in_time(text)


def test_a_time_brings_the_date_column_unnamed_and_not_otherwise(school):
    def shown(question):
        return {c.name: c.why for t in school.retrieve(question, k=1, m=3).entries for c in t.columns}

    plain = shown("Which students live in Warsaw?")
    timed = shown("Which students living in Warsaw were enrolled in 1999?")
    assert "birth_date" not in plain and shown("May I see the students living in Warsaw?") == plain
    assert timed["birth_date"] == ["time"] and set(plain) < set(timed)


def test_a_named_date_column_stands_for_the_time_and_its_siblings_get_no_lift(tmp_path, settings):
    import sqlite3

    from reflect_sql.kb.build import build_kb
    from reflect_sql.kb.retrieve import Retriever

    db = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript("""
        CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT, payment_method TEXT, channel TEXT,
                             opened_at TEXT, closed_at TEXT, refunded_at TEXT);
        INSERT INTO orders VALUES (1, 'DONE', 'CASH', 'WEB', '2025-05-01 10:00:00', '2025-05-01 10:30:00', NULL),
                                  (2, 'DONE', 'CARD', 'SHOP', '2025-06-02 11:00:00', '2025-06-02 11:20:00', '2025-06-03 09:00:00');
    """)
    conn.commit()
    conn.close()
    build_kb(str(db), tmp_path / "kb", settings)
    retriever = Retriever(tmp_path / "kb", settings)
    try:
        unnamed = {c.name: c.why for c in retriever.retrieve("Revenue per payment method in May 2025", k=1, m=3).entries[0].columns}
        named = {c.name: c.why for c in retriever.retrieve("Revenue per payment method in May 2025",
                                                         evidence="May 2025 refers to opened_at", k=1, m=3).entries[0].columns}
    finally:
        retriever.close()
    assert any(why == ["time"] for why in unnamed.values())
    assert "opened_at" in named and not any("time" in why for why in named.values())
