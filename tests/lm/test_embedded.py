"""The real embedded model through DSPy: typed outputs, executable SQL, and a bit-identical replay.

Slow (about a minute on 2 cores with the 1.5B model); select or skip with ``-m embedded_lm``.
``REFLECT_SQL_TEST_LOCAL_MODEL=qwen2.5-coder-0.5b`` uses the smaller model.
"""
from __future__ import annotations

import re
import sqlite3
from typing import Literal

import dspy
import pydantic
import pytest

from reflect_sql.lm.accounting import CostMeter, lm_scope
from reflect_sql.lm.cassette import Cassette
from reflect_sql.lm.factory import make_lm
from reflect_sql.lm.adapters import make_adapter

pytestmark = pytest.mark.embedded_lm

SCHEMA = """\
CREATE TABLE restaurants (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL);
CREATE TABLE dishes (id INTEGER PRIMARY KEY, restaurant_id INTEGER NOT NULL REFERENCES restaurants(id),
                     name TEXT NOT NULL, price REAL NOT NULL, vegetarian INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, dish_id INTEGER NOT NULL REFERENCES dishes(id),
                     quantity INTEGER NOT NULL, ordered_on TEXT NOT NULL);"""

ROWS = """\
INSERT INTO restaurants VALUES (1, 'Trattoria Roma', 'Lyon'), (2, 'Spice Route', 'Paris'), (3, 'Green Leaf', 'Lyon');
INSERT INTO dishes VALUES (1, 1, 'Margherita', 9.5, 1), (2, 1, 'Lasagne', 12.0, 0), (3, 2, 'Vindaloo', 14.5, 0),
                          (4, 2, 'Dal', 8.0, 1), (5, 3, 'Buddha Bowl', 11.0, 1);
INSERT INTO orders VALUES (1, 1, 2, '2024-05-01'), (2, 3, 1, '2024-05-01'), (3, 3, 3, '2024-05-02'),
                          (4, 5, 1, '2024-05-03'), (5, 2, 4, '2024-05-03');"""

QUESTIONS = [
    "How many restaurants are in Lyon?",
    "List the names of vegetarian dishes.",
    "What is the average dish price per restaurant name?",
    "How many orders were placed on 2024-05-03?",
    "Which dish has the highest price?",
]


class GenerateSQL(dspy.Signature):
    """Write one SQLite query that answers the question over the schema."""

    schema_ddl: str = dspy.InputField(desc="CREATE TABLE statements")
    question: str = dspy.InputField()
    sql: str = dspy.OutputField(desc="a single SQLite SELECT statement, no commentary")


class Dish(pydantic.BaseModel):
    name: str
    price: float


class ReadMenuLine(dspy.Signature):
    """Extract facts from a menu line."""

    text: str = dspy.InputField()
    spiciness: int = dspy.OutputField(ge=0, le=5, desc="0 = mild, 5 = very hot")
    course: Literal["starter", "main", "dessert"] = dspy.OutputField()
    dish: Dish = dspy.OutputField()


def _clean(sql: str) -> str:
    # Small models sometimes wrap the query in a Markdown fence.
    fenced = re.search(r"```(?:sql)?\s*(.*?)```", sql, re.S | re.I)
    return (fenced.group(1) if fenced else sql).strip().rstrip(";")


@pytest.fixture(scope="module")
def database():
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.executescript(SCHEMA + "\n" + ROWS)
    yield conn
    conn.close()


@pytest.fixture(scope="module")
def recorded(embedded_settings, tmp_path_factory):
    """Generate SQL for the five questions once, recording every call into a cassette."""
    tape = tmp_path_factory.mktemp("tape")
    lm = make_lm(embedded_settings.lm, embedded_settings, cassette=Cassette(tape, "record"))
    generate = dspy.Predict(GenerateSQL)
    with dspy.context(lm=lm, adapter=make_adapter(embedded_settings)), CostMeter() as meter, lm_scope("test.sql"):
        sqls = [generate(schema_ddl=SCHEMA, question=q).sql for q in QUESTIONS]
    return {"tape": tape, "sqls": sqls, "lm": lm, "summary": meter.summary()}


def test_typed_signature_returns_valid_values(embedded_settings, monkeypatch):
    lm = make_lm(embedded_settings.lm, embedded_settings)
    bodies = []
    chat = lm.engine.chat
    monkeypatch.setattr(lm.engine, "chat", lambda body: bodies.append(body) or chat(body))
    read = dspy.Predict(ReadMenuLine)
    lines = [
        ("Our fiery vindaloo main course costs 14.50 and is very hot.", "main"),
        ("Tiramisu, a mild dessert, 6 euros.", "dessert"),
        ("Start with garlic bread for 4.25; not spicy at all.", "starter"),
    ]
    with dspy.context(lm=lm, adapter=make_adapter(embedded_settings)):
        outs = [read(text=text) for text, _ in lines[:2]]
    # JSONAdapter asks for grammar-constrained output through response_format.
    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        outs.append(read(text=lines[2][0]))
    assert "response_format" not in bodies[0]
    assert bodies[-1]["response_format"]["type"] == "json_schema"
    assert "dish" in bodies[-1]["response_format"]["json_schema"]["schema"]["properties"]
    for out in outs:
        assert isinstance(out.spiciness, int) and 0 <= out.spiciness <= 5
        assert out.course in ("starter", "main", "dessert")
        assert isinstance(out.dish, Dish) and out.dish.name.strip() and out.dish.price > 0
    # Valid is not enough to show the model read the text; a 1.5B model may slip on one label.
    assert sum(out.course == course for out, (_, course) in zip(outs, lines)) >= 2
    assert outs[0].dish.price == pytest.approx(14.5) and outs[2].dish.price == pytest.approx(4.25)


def test_generated_sql_executes(recorded, database):
    failures = []
    for question, sql in zip(QUESTIONS, recorded["sqls"]):
        try:
            database.execute(_clean(sql)).fetchall()
        except sqlite3.Error as exc:
            failures.append(f"{question!r}: {sql!r} -> {exc}")
    assert not failures, "\n".join(failures)
    summary = recorded["summary"]
    assert summary["lm_calls"] >= 5 and summary["prompt_tokens"] > 5 * 100 and summary["completion_tokens"] > 0
    # The schema and instructions are a shared prefix: later calls reuse its KV cache.
    assert summary["cached_prompt_tokens"] > 0


def test_replay_is_identical_with_zero_model_calls(recorded, embedded_settings):
    player = make_lm(embedded_settings.lm, embedded_settings, cassette=Cassette(recorded["tape"], "replay"))
    generate = dspy.Predict(GenerateSQL)
    with dspy.context(lm=player, adapter=make_adapter(embedded_settings)), CostMeter() as meter:
        replayed = [generate(schema_ddl=SCHEMA, question=q).sql for q in QUESTIONS]
    assert replayed == recorded["sqls"]
    assert player.engine.calls == 0
    assert meter.summary()["replays"] == recorded["summary"]["lm_calls"]


def test_engine_is_loaded_once_and_shared_safely_between_threads(embedded_settings):
    from concurrent.futures import ThreadPoolExecutor

    from reflect_sql.lm import local_engine

    generator = make_lm(embedded_settings.lm, embedded_settings, "generator")
    judge = make_lm(embedded_settings.lm, embedded_settings, "judge")
    generator("Say OK.", max_tokens=4)  # make sure this process has the server loaded
    loads = local_engine.load_count

    def ask(i):
        lm = generator if i % 2 else judge
        return lm(f"Reply with the digit {i} only.", max_tokens=4)[0]

    with ThreadPoolExecutor(max_workers=4) as pool:
        replies = list(pool.map(ask, range(4)))
    assert all(isinstance(r, str) and r.strip() for r in replies)
    assert local_engine.load_count == loads
    assert generator.engine.calls + judge.engine.calls == 5
