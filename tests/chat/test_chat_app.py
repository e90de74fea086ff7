"""Aria's chat app without a browser: the stream, the answer, the queue, the verdicts."""
from __future__ import annotations

import threading

import pytest
from chat_helpers import read_stream
from fastapi.testclient import TestClient

pytestmark = pytest.mark.slow  # the restaurant database and its KB take ~45 s, once per session

WAITING = "How long has table 5 been waiting for its appetizer, in minutes?"
REVENUE = "What was last night's dinner-shift revenue per category?"


def test_the_stream_shows_each_step_then_the_answer(chat_app):
    app, _ = chat_app()
    client = TestClient(app)
    page = client.get("/")
    assert page.status_code == 200 and "Aria" in page.text
    # Offline: the page loads its script and style from this server, nothing from elsewhere.
    assert "://" not in page.text and 'src="/static/chat.js"' in page.text
    assert client.get("/static/chat.js").status_code == 200 and client.get("/static/chat.css").status_code == 200

    job = client.post("/ask", data={"question": WAITING}).json()["job"]
    events = read_stream(client, job)
    kinds = [name for name, _ in events]
    assert kinds[0] == "queue" and kinds[-1] == "done" and kinds[-2] == "answer"
    steps = [data for name, data in events if name == "step"]
    # Each step is announced as it starts, then shown with its decision and scores once it ended.
    for loop in ("retrieval", "entailment"):  # steps the loops add before their judge is asked
        shown = ["running…" in s["html"] for s in steps if f'data-loop="{loop}"' in s["html"]]
        assert shown[0] and not shown[-1], loop
    finished = [s for s in steps if "running…" not in s["html"]]
    assert any('data-loop="entailment"' in s["html"] and "accept" in s["html"] and "Es5 Ed5 =5 θ3" in s["html"] for s in finished)

    answer = events[-2][1]
    html = answer["html"]
    assert 'class="sentence"' in html and "The answer (waited_minutes) is" in html
    assert "<table" in html and "<th>waited_minutes</th>" in html
    assert "kitchen_tickets" in html and "cost:" in html and "LM calls" in html
    assert 'value="correct"' in html and 'value="wrong"' in html
    assert any('data-loop="answer"' in s and "sentence kept" in s for s in answer["steps"])
    assert any("held for the manager" in s for s in answer["steps"])  # enrichment waits for the verdict


def test_correct_enriches_the_kb_as_human_verified_and_wrong_never_does(chat_app, restaurant_kb):
    from reflect_sql.kb.enrich import history
    from reflect_sql.kb.verdicts import verdicts
    from reflect_sql.kb.versions import KBDir

    _, kb = restaurant_kb
    app, _ = chat_app()
    client = TestClient(app)
    before = len(history(kb))
    right = client.post("/ask", data={"question": WAITING}).json()["job"]
    wrong = client.post("/ask", data={"question": REVENUE}).json()["job"]
    read_stream(client, right), read_stream(client, wrong)
    assert len(history(kb)) == before  # nothing is learnt before a verdict

    reply = client.post(f"/jobs/{wrong}/verdict", data={"verdict": "wrong"})
    assert reply.status_code == 200 and "unchanged" in reply.text
    assert len(history(kb)) == before

    reply = client.post(f"/jobs/{right}/verdict", data={"verdict": "correct"})
    assert reply.status_code == 200 and "human-verified" in reply.text
    last = history(kb)[-1]
    assert len(history(kb)) == before + 1 and last["provenance"]["verified_by"] == "human"
    assert last["provenance"]["judgments"]["human"] == {"passed": True}
    assert last["summary"].startswith("human-verified answer to: How long has table 5")
    assert any(e.question == WAITING for e in KBDir(kb).load().examples)
    assert [(v["verdict"], v["enriched"]) for v in verdicts(kb)] == [("wrong", False), ("correct", True)]
    assert client.post(f"/jobs/{right}/verdict", data={"verdict": "wrong"}).status_code == 409  # once only
    page = client.get("/kb/history")
    assert "human-verified answer to" in page.text and 'class="verified-by">human<' in page.text


def test_questions_queue_for_the_one_model_and_each_tab_sees_its_place(chat_app):
    app, script = chat_app(hold=WAITING)
    client = TestClient(app)
    first = client.post("/ask", data={"question": WAITING}).json()
    assert script.started.wait(60)  # the first question holds the model
    second = client.post("/ask", data={"question": REVENUE}).json()
    third = client.post("/ask", data={"question": REVENUE + " "}).json()
    assert (second["position"], third["position"]) == (1, 2)  # 0 is the question being answered

    collected: dict[str, list] = {}
    readers = [threading.Thread(target=lambda j=j: collected.__setitem__(j, read_stream(client, j)))
               for j in (first["job"], second["job"], third["job"])]
    for r in readers:
        r.start()
    threading.Timer(1.0, script.release.set).start()
    for r in readers:
        r.join(120)
    places = {job: [d["position"] for name, d in events if name == "queue"] for job, events in collected.items()}
    assert places[first["job"]] == [0]
    # Each tab saw its own place first, then only better ones. A scripted answer takes less than a
    # stream's poll, so any later place (even "answering now") may fall between two polls.
    for job, place in ((second["job"], 1), (third["job"], 2)):
        seen = places[job]
        assert seen[0] == place and seen == sorted(set(seen), reverse=True), (place, seen)
    assert "Next in the queue" in collected[second["job"]][0][1]["html"]
    assert "Place 2 in the queue (1 question ahead)" in collected[third["job"]][0][1]["html"]
    assert all(events[-2][0] == "answer" for events in collected.values())


def test_bad_requests_are_refused_clearly(chat_app):
    app, _ = chat_app()
    client = TestClient(app)
    assert client.post("/ask", data={"question": "   "}).json()["detail"].startswith("the question is empty")
    assert client.get("/jobs/nope/events").status_code == 404
    job = client.post("/ask", data={"question": WAITING}).json()["job"]
    read_stream(client, job)
    assert client.post(f"/jobs/{job}/verdict", data={"verdict": "maybe"}).status_code == 400


def test_a_human_verdict_on_an_example_the_kb_holds_is_a_version_of_its_own(restaurant_kb):
    from reflect_sql.kb.enrich import enrich, history
    from reflect_sql.kb.versions import KBDir

    _, kb = restaurant_kb
    sql = "SELECT COUNT(*) FROM menu_items"
    result = {"columns": ["n"], "rows": [[45]]}
    first = enrich(kb, "How many dishes?", sql, result, {"entailment": {"score": 5, "threshold": 3}})
    assert first.accepted and history(kb)[-1]["provenance"]["verified_by"] == "pipeline"
    examples = len(KBDir(kb).load().examples)
    again = enrich(kb, "How many dishes?", sql, result, {"entailment": {"score": 5, "threshold": 3}, "human": True},
                   verified_by="human")
    assert again.accepted and again.version == first.version + 1
    assert [c["kind"] for c in again.changes] == ["verify"] and len(KBDir(kb).load().examples) == examples
    # The anti-pollution path still applies: a human verdict does not carry a failed judge.
    refused = enrich(kb, "How many tables?", "SELECT COUNT(*) FROM tables", result,
                     {"entailment": {"score": 2, "threshold": 3}, "human": True}, verified_by="human")
    assert not refused.accepted and len(history(kb)) == again.version


def test_serve_refuses_a_bad_port_in_one_line(tmp_path, capsys):
    from reflect_sql.cli import main

    assert main(["serve", "--db", str(tmp_path / "x.sqlite"), "--kb-dir", str(tmp_path / "kb"), "--port", "70000"]) == 2
    assert "not a TCP port" in capsys.readouterr().err
