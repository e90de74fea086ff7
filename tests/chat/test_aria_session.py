"""The recorded browser session (experiments/smartrestaurant/aria_session.py) against the chat served
by uvicorn on 127.0.0.1 with the scripted oracle LM: one question, its record and its screenshot."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_helpers import free_port, serving

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture
def served(chat_app):
    """The base URL of the chat served by uvicorn on 127.0.0.1 (the oracle answers at once)."""
    app, _ = chat_app()
    with serving(app) as url:
        yield url


def test_the_session_records_one_answered_question_and_its_screenshot(served, tmp_path):
    if not CHROMIUM.is_file():
        pytest.skip(f"no chromium at {CHROMIUM} (Debian's chromium package)")
    from reflect_sql.experiments.smartrestaurant.aria_session import main

    out = tmp_path / "session"
    assert main(["--url", served, "--out", str(out), "--question-ids", "1", "--timeout-s", "120"]) == 0

    records = json.loads((out / "session.json").read_text(encoding="utf-8"))
    assert [r["question_id"] for r in records] == [1]
    record = records[0]
    assert record["status"] == "answered" and record["lang"] == "en"
    assert record["sentence"] and record["sentence"].startswith("The answer (waited_minutes) is ")
    assert "kitchen_tickets" in record["sql"]
    assert record["seconds"] > 0
    assert record["columns"] == ["waited_minutes"] and len(record["rows"]) == 1
    assert record["rows"][0][0] in record["sentence"]
    assert record["cost"] and record["cost"]["lm_calls"] > 0
    assert [s["loop"] for s in record["steps"]][:2] == ["retrieval", "synthesis.generate"]
    assert record["final_decision"]
    assert record["requests_outside_127.0.0.1"] == []
    assert (out / "q1.png").is_file() and (out / "q1.png").stat().st_size > 5_000


def test_bad_input_is_one_line_and_exit_2(served, tmp_path, capsys):
    from reflect_sql.experiments.smartrestaurant.aria_session import main

    assert main(["--url", served, "--out", str(tmp_path), "--question-ids", "1,9999"]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0
    port = free_port()
    assert main(["--url", f"http://127.0.0.1:{port}/", "--out", str(tmp_path)]) == 2
    assert "does not answer" in capsys.readouterr().err
