"""Fixtures of the chat tests: the SmartRestaurant database and its KB, made once per session
(~45 s), a fresh copy of the KB per test (verdicts change it), and a scripted oracle LM that answers
the scenario's questions with their gold SQL, passes every judge and tells the result in a
sentence built from the result preview it is shown."""
from __future__ import annotations

import json
import shutil
import sys
from importlib.resources import files
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # for `chat_helpers`, shared by the test modules
from chat_helpers import OracleScript  # noqa: E402

SCENARIO = files("reflect_sql.experiments.smartrestaurant")


@pytest.fixture(scope="session")
def restaurant_questions() -> list[dict]:
    return json.loads((SCENARIO / "questions.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def restaurant(tmp_path_factory) -> tuple[Path, Path]:
    """(database, KB directory) of the SmartRestaurant scenario, built as `reflect-sql demo` does."""
    from reflect_sql.cli import main
    from reflect_sql.experiments.smartrestaurant.demo_db import ensure_demo_db

    folder = tmp_path_factory.mktemp("restaurant")
    db, kb = folder / "smartrestaurant.sqlite", folder / "kb"
    ensure_demo_db(db)
    assert main(["kb", "build", "--db", str(db), "--kb-dir", str(kb), "--descriptions", str(SCENARIO / "descriptions"),
                 "--glossary", str(SCENARIO / "glossary.yaml")]) == 0
    return db, kb


@pytest.fixture
def restaurant_kb(restaurant, tmp_path) -> tuple[str, Path]:
    """The database and a copy of its KB that this test may change."""
    db, kb = restaurant
    copy = tmp_path / "kb"
    shutil.copytree(kb, copy)
    return str(db), copy


@pytest.fixture
def chat_app(restaurant_kb, restaurant_questions):
    """make(hold=None) -> (app, script): the chat over the restaurant KB copy, on a scripted oracle."""
    from reflect_sql.cli.serve_cmd import build_chat
    from reflect_sql.db import open_engine
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.settings import Settings
    import reflect_sql.lm.factory as factory

    db, kb = restaurant_kb
    opened = []

    def make(hold: str | None = None, monkeypatch=None):
        script = OracleScript(restaurant_questions, hold)
        original = factory.configure_lms
        factory.configure_lms = lambda settings: (ScriptedLM(script, role="generator"), ScriptedLM(script, role="judge"))
        try:
            settings = Settings(kb_dir=kb, lm="scripted/oracle")
            engine = open_engine(db, settings)
            app, retriever, _ = build_chat(settings, engine, db, "none")
        finally:
            factory.configure_lms = original
        opened.append((engine, retriever))
        return app, script

    yield make
    for engine, retriever in opened:
        retriever.close()
        engine.close()
