"""The embedded model behind `reflect-sql models serve` on 127.0.0.1, used through LiteLLM as any
OpenAI-compatible server is (lm: openai/<model>, lm_api_base): `ask` and a 3-question `eval` with
threads 2 answer as the in-process engine does at temperature 0, and cost accounting (tokens,
seconds, cached prompt tokens) comes through. One model process at a time: the in-process runs end
before the server starts. Prints the wall time of the served eval on 2 threads."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.embedded_lm, pytest.mark.slow]

MODEL = os.environ.get("REFLECT_SQL_TEST_LOCAL_MODEL", "qwen2.5-coder-0.5b")
QUESTIONS = [
    (1, "How many fruits are there?", "SELECT COUNT(*) FROM item WHERE kind = 'fruit'"),
    (2, "What is the name of the most expensive item?", "SELECT name FROM item ORDER BY price DESC LIMIT 1"),
    (3, "List the names of the vegetables.", "SELECT name FROM item WHERE kind = 'veg'"),
]
# One round per loop: every loop still runs with its real judge (logprobs included), in bounded time.
SETTINGS = {"lm_cache": False, "use_enrichment": False, "max_retrieval_iterations": 1, "max_semantic_iterations": 1,
            "max_entailment_iterations": 1, "lm_temperature": 0.0}


def _cli(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "reflect_sql", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def shop(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("served")
    db_dir = root / "dev_databases" / "shop"
    db_dir.mkdir(parents=True)
    conn = sqlite3.connect(db_dir / "shop.sqlite")
    conn.executescript("""
        CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price REAL, kind TEXT);
        INSERT INTO item VALUES (1, 'apple', 1.5, 'fruit'), (2, 'pear', 2.0, 'fruit'),
                                (3, 'leek', 0.5, 'veg'), (4, 'kale', 3.0, 'veg');
    """)
    conn.commit()
    conn.close()
    (root / "dev.json").write_text(json.dumps([
        {"question_id": i, "db_id": "shop", "question": q, "evidence": "", "SQL": sql, "difficulty": "simple"}
        for i, q, sql in QUESTIONS]))
    return root


def _config(root: Path, path: Path, threads: int, **settings) -> Path:
    path.write_text(json.dumps({
        # The eval runs single-pass (one call a question) to keep `make test` in CI's time; `ask`
        # runs every loop and its judges through the server.
        "name": path.stem, "mode": "single-pass", "dataset": {"format": "bird", "root": str(root)}, "threads": threads,
        "kb": {"enabled": False}, "mlflow": {"enabled": False}, "settings": {**SETTINGS, **settings}}))
    return path


def _sets(**settings) -> list[str]:
    return [item for key, value in {**SETTINGS, **settings}.items() for item in ("--set", f"{key}={value}")]


def _answers(out: Path) -> dict:
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return {r["question_id"]: (r["sql"], r["rows_digest"], r["correct"]) for r in rows}


@pytest.fixture(scope="module")
def server():
    """`reflect-sql models serve` on a free port, until the module's tests are done."""
    import port_for

    from reflect_sql.lm.models import ModelError, ensure_model
    from reflect_sql.settings import Settings

    try:
        ensure_model(MODEL, Settings().model_dir)
    except ModelError as exc:
        pytest.skip(f"embedded model unavailable: {exc}")
    port = port_for.select_random()
    proc = subprocess.Popen([sys.executable, "-m", "reflect_sql", "models", "serve", "--model", MODEL, "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # printed once it listens
        assert f"at http://127.0.0.1:{port}/v1" in line, proc.stderr.read()
        health = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10).read())
        assert health["status"] == "ok"
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        assert proc.wait(timeout=60) == 0  # SIGTERM is how a server is stopped


def test_served_model_answers_ask_and_a_threaded_eval_like_the_in_process_engine(shop, tmp_path_factory, request):
    work = tmp_path_factory.mktemp("runs")
    db = str(shop / "dev_databases" / "shop" / "shop.sqlite")
    question = QUESTIONS[1][1]

    # In process first, and done before the server loads the model.
    local = _cli("ask", "--db", db, question, "--json", "--lm", f"local/{MODEL}", *_sets())
    assert local.returncode == 0, local.stderr
    inprocess_out = work / "inprocess"
    done = _cli("eval", str(_config(shop, work / "inprocess.yaml", 1, lm=f"local/{MODEL}")), "--out", str(inprocess_out),
                "--no-mlflow", "--no-progress", "--program", "none", "--json")
    assert done.returncode == 0, done.stderr
    inprocess = json.loads(done.stdout)

    base = request.getfixturevalue("server")
    served_lm = {"lm": f"openai/{MODEL}", "lm_api_base": base}
    served = _cli("ask", "--db", db, question, "--json", "--lm", served_lm["lm"], *_sets(lm_api_base=base))
    assert served.returncode == 0, served.stderr
    local_answer, served_answer = json.loads(local.stdout), json.loads(served.stdout)
    assert served_answer["sql"] == local_answer["sql"] and served_answer["rows"] == local_answer["rows"]
    assert served_answer["cost"]["prompt_tokens"] == local_answer["cost"]["prompt_tokens"]

    walls = {}
    for threads in (2,):  # threads 1 vs 2 wall times were measured once, for the issue, not per test run
        out = work / f"served-{threads}"
        started = time.perf_counter()
        done = _cli("eval", str(_config(shop, work / f"served{threads}.yaml", threads, **served_lm)), "--out", str(out),
                    "--no-mlflow", "--no-progress", "--program", "none", "--json")
        walls[threads] = time.perf_counter() - started
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert _answers(out) == _answers(inprocess_out), f"threads {threads}"
        cost, expected = summary["cost"], inprocess["cost"]
        for key in ("lm_calls", "prompt_tokens", "completion_tokens"):  # the same prompts, the same replies
            assert cost[key] == expected[key], (key, cost, expected)
        assert cost["cached_prompt_tokens"] > 0 and cost["lm_seconds"] > 0  # what llama.cpp's server reports
    print(f"\nserved {MODEL}, 3-question single-pass eval: threads 2 {walls[2]:.1f} s "
          f"(in-process threads 1: {inprocess['wall_seconds']:.1f} s evaluating)")
