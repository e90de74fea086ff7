"""Helpers of the chat tests (importlib mode cannot import conftest or a test module by name)."""
from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serving(app) -> Iterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 in a thread; yields its base URL, stops it after."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{server.config.port}/"
    finally:
        server.should_exit = True
        thread.join(10)


def read_stream(client, job: str) -> list[tuple[str, dict]]:
    """Every (event, data) of a question's stream, until it ends."""
    events, name = [], None
    with client.stream("GET", f"/jobs/{job}/events") as response:
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line.split(":", 1)[1])))
    return events


def sentence_from_preview(preview: str) -> str:
    """What a good writer says: the first row's values, copied from the preview."""
    lines = preview.splitlines()
    columns = lines[0].split("columns: ", 1)[1]
    first = lines[1] if len(lines) > 1 else "nothing"
    return f"The answer ({columns}) is {first.replace(chr(39), '')}."


class OracleScript:
    """Gold SQL for the scenario's questions, passing judges, a sentence from the preview. A question
    in ``hold`` waits for ``release`` before its SQL is written (to keep the queue busy)."""

    def __init__(self, questions: list[dict], hold: str | None = None):
        from reflect_sql.experiments.scripted import PASSING_REPLIES

        self.gold = {q["question"]: q["SQL"] for q in questions}
        self.passing = PASSING_REPLIES
        self.hold = hold
        self.release = threading.Event()
        self.started = threading.Event()

    def __call__(self, name: str, inputs: dict) -> dict:
        question = inputs.get("question", "").strip()
        if name == "GenerateSQL":
            if question == self.hold:
                self.started.set()
                assert self.release.wait(60), "the test never released the held question"
            return {"sql": self.gold[question]}
        if name == "WriteAnswer":
            return {"answer": sentence_from_preview(inputs["result_preview"])}
        return self.passing[name]
