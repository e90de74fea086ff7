"""`reflect-sql aria`'s preparation on PostgreSQL: the restaurant data in the bundled local
PostgreSQL, the KB on pgvector in the same server, and the chat answering over them."""
from __future__ import annotations

import json
import sqlite3

import pytest
from chat_helpers import OracleScript, read_stream
from fastapi.testclient import TestClient

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

QUESTION = "What was last night's dinner-shift revenue per category?"


def test_aria_loads_postgres_builds_the_kb_on_pgvector_and_answers(restaurant, restaurant_questions, tmp_path):
    from reflect_sql.cli.aria_cmd import prepare
    from reflect_sql.cli.serve_cmd import build_chat
    from reflect_sql.db import open_engine
    from reflect_sql.kb.pgvector_store import PgVectorStore
    from reflect_sql.kb.store import open_store
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.settings import Settings
    import reflect_sql.lm.factory as factory

    sqlite_path, _ = restaurant
    db_url, server, kb_dir = prepare(sqlite_path, tmp_path / "aria", status=lambda m: None)
    assert db_url.startswith("postgresql://") and db_url.endswith("schema=smartrestaurant")
    manifest = json.loads((kb_dir / "index.json").read_text())
    assert manifest["store"] == "pgvector" and manifest["url"] == server
    assert isinstance(open_store(kb_dir), PgVectorStore)
    # A second run loads nothing and embeds nothing.
    assert (tmp_path / "aria" / "loaded.json").is_file()
    assert prepare(sqlite_path, tmp_path / "aria", status=lambda m: None) == (db_url, server, kb_dir)
    assert len((kb_dir / "log.jsonl").read_text().splitlines()) == 1

    script = OracleScript(restaurant_questions)
    original = factory.configure_lms
    factory.configure_lms = lambda settings: (ScriptedLM(script), ScriptedLM(script))
    try:
        settings = Settings(kb_dir=kb_dir, lm="scripted/oracle")
        with open_engine(db_url, settings) as engine:
            assert engine.dialect == "postgres"
            app, retriever, _ = build_chat(settings, engine, db_url, "none")
            client = TestClient(app)
            job = client.post("/ask", data={"question": QUESTION}).json()["job"]
            events = read_stream(client, job)
            retriever.close()
    finally:
        factory.configure_lms = original
    answer = app.state.queue.jobs[job].answer
    assert answer["scores"]["entailment"] == 5 and answer["answer_source"] == "model"
    # PostgreSQL holds the rows the SQLite file does: the same revenue per category.
    gold = next(q["SQL"] for q in restaurant_questions if q["question"] == QUESTION)
    with sqlite3.connect(sqlite_path) as con:
        expected = sorted((name, float(revenue)) for name, revenue in con.execute(gold))
    assert sorted((name, float(revenue)) for name, revenue in answer["rows"]) == expected and expected
    assert any(name == "answer" for name, _ in events)
