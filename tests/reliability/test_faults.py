"""Faults in the middle of a run: each ends in a clear per-question error or a retry, and the run
goes on. The LM raises, times out, answers nothing, garbage or a broken format; a SQLite file goes
missing or is locked; PostgreSQL restarts or goes away; a query runs past its timeout.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from pathlib import Path

import pytest

import reliability_cases as cases


def _records(out: Path) -> dict[str, dict]:
    return {r["question_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def _trace(out: Path, qid: str) -> str:
    return (out / "traces" / f"{qid}.json").read_text()


def _config(path: Path, root: Path, kb: bool, cache: Path | None = None) -> Path:
    kb_line = f"kb: {{enabled: true, cache: {cache}}}" if kb else "kb: {enabled: false}"
    path.write_text(f"dataset: {{format: bird, root: {root}}}\nmlflow: {{enabled: false}}\n{kb_line}\n"
                    "score_timeout_s: 2\nsettings: {lm_cache: false, query_timeout_s: 1}\n")
    return path


class Hooked:
    """The runner's program factory, with a hook that runs before each question's program."""

    def __init__(self, inner, before):
        self.inner, self.before = inner, before

    def __call__(self, q):
        self.before(q)
        return self.inner(q)

    def close(self):
        self.inner.close()


def _eval(config_path: Path, out: Path, script, before=None, retry_errors=False) -> tuple[dict, dict[str, dict]]:
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.experiments.runner import run_eval
    from reflect_sql.lm.scripted import ScriptedLM

    config = load_config(config_path)
    factory = PipelineFactory(config, out, lms=(ScriptedLM(script, role="generator"), ScriptedLM(script, role="judge")))
    if before is not None:
        factory = Hooked(factory, before)
    summary = run_eval(config, out, factory, progress=False, retry_errors=retry_errors)
    return summary, _records(out)


# --- the LM misbehaves ----------------------------------------------------------------------------

LM_FAULTS = {  # question index -> fault, and what the trace must say about it
    1: ("raise", "api:"), 2: ("timeout", "timeout:"), 3: ("empty", "empty:"), 4: ("garbage", "format:"),
    5: ("broken", "format:"), 6: ("out-of-scale", "format:"), 7: ("judge-raise", "api:"), 8: ("flaky", "api:"),
}


@pytest.mark.slow
def test_lm_faults_end_in_per_question_errors_and_the_run_goes_on(shop_copy, tmp_path, ledger, enrichment_spy):
    rows = [(f"q{i}", "shop", q, gold) for i, (q, gold) in enumerate(cases.QUESTIONS)]
    rows[9] = ("q9", "shop", "How many order triples are there?", cases.SLOW_SQL)  # runs past its timeout
    root = cases.write_dataset(tmp_path / "data", {"shop": shop_copy}, rows)
    faults = {rows[i][2]: kind for i, (kind, _) in LM_FAULTS.items()}
    script = cases.oracle({q: gold for _, _, q, gold in rows}, faults)
    start = len(enrichment_spy)
    out = tmp_path / "out"
    summary, records = _eval(_config(tmp_path / "c.yaml", root, kb=True, cache=tmp_path / "kb"), out, script)

    assert summary["finished"] == len(rows) and summary["exceptions"] == 0
    for i, (kind, mark) in LM_FAULTS.items():
        r, trace = records[f"q{i}"], _trace(out, f"q{i}")
        assert mark in trace, f"{kind}: the trace does not say {mark}"
        if kind in ("raise", "timeout", "empty", "garbage", "broken"):
            assert r["sql"] is None and r["error"] == "no SQL could be generated", (kind, r["error"])
            ending = f"per-question error ({mark[:-1]})"
        else:  # the generator still answered; only judgments (or one call) were lost
            assert r["correct"], (kind, r)
            ending = "answered after a retry" if kind == "flaky" else "answered, unverified"
        ledger.fault(f"LM {kind}", ending)
    slow = records["q9"]
    assert slow["error"].startswith("timeout:") and slow["status"] == "pred_timeout"
    ledger.fault("query past its timeout (sqlite)", "per-question error (timeout)")
    for i in (0, 10, 11):
        assert records[f"q{i}"]["correct"], records[f"q{i}"]

    # Anti-pollution: a question whose judges failed taught the KB nothing; verified ones did.
    taught = {c["question"] for c in enrichment_spy[start:] if c["accepted"]}
    unverified = {rows[i][2] for i in (6, 7, 9)}
    assert not taught & unverified
    assert rows[0][2] in taught


class FakeOpenAI:
    """An OpenAI-compatible endpoint for LiteLLM whose replies fit every signature; ``plan`` lists
    what the next requests get ("hang", "500", "ok"), then "ok" forever."""

    FIELDS = {**{k: v for d in cases.PASS.values() for k, v in d.items()}, "sql": cases.BENIGN,
              "repaired_sql": cases.BENIGN, "e_schema": 5, "e_data": 5}

    def __init__(self):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.plan: list[str] = []
        self.requests = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length", 0)))
                fake.requests += 1
                what = fake.plan.pop(0) if fake.plan else "ok"
                if what == "hang":
                    time.sleep(3)
                    what = "ok"  # too late: the client gave up after lm_timeout_s
                if what == "500":
                    body, status = b'{"error": {"message": "upstream overloaded"}}', 500
                else:
                    text = "\n\n".join([f"[[ ## {k} ## ]]\n{json.dumps(v) if not isinstance(v, str) else v}"
                                        for k, v in fake.FIELDS.items()] + ["[[ ## completed ## ]]"])
                    body, status = json.dumps({
                        "id": "x", "object": "chat.completion", "created": 0, "model": "fake",
                        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}).encode(), 200
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()


@pytest.mark.slow
def test_lm_faults_through_litellm(shop_db, monkeypatch, capsys, ledger):
    """The real client path (LiteLLM, its timeout and retries) against a misbehaving endpoint."""
    from reflect_sql.cli import main

    fake = FakeOpenAI()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_BASE", fake.url)

    def ask(retries: int, plan: list[str]) -> tuple[int, dict, str, float]:
        fake.plan = list(plan)
        argv = ["ask", "--db", str(shop_db), "--json", "--no-enrichment", "--lm", "openai/fake-model"]
        for s in ("lm_timeout_s=1", f"lm_retries={retries}", "lm_cache=false", "max_retrieval_iterations=1",
                  "max_semantic_iterations=1", "max_entailment_iterations=1", "max_syntax_repairs=0"):
            argv += ["--set", s]
        capsys.readouterr()
        started = time.perf_counter()
        code = main(argv + ["--", "How many orders are there?"])
        out, err = capsys.readouterr()
        return code, json.loads(out), err, time.perf_counter() - started

    before = cases.sqlite_fingerprint(shop_db)
    try:
        code, answer, err, seconds = ask(0, ["hang"] * 20)
        failures = " ".join(s.get("failure") or "" for s in answer["trace"])
        assert code == 1 and answer["error"] == "no SQL could be generated" and "timeout:" in failures, (code, answer, err)
        ledger.fault("LM timeout (LiteLLM, every call)", f"per-question error after {seconds:.1f} s")

        code, answer, err, _ = ask(1, ["hang"])
        assert code == 0 and answer["rows"] == [[1200]] and not answer.get("error"), (answer, err)
        ledger.fault("LM timeout once (LiteLLM)", "answered after a retry")

        code, answer, err, _ = ask(1, ["500"])
        assert code == 0 and answer["rows"] == [[1200]], (answer, err)
        ledger.fault("LM HTTP 500 once (LiteLLM)", "answered after a retry")
    finally:
        fake.close()
    assert cases.sqlite_fingerprint(shop_db) == before


# --- the SQLite file goes missing or is locked ---------------------------------------------------


def _two_db_dataset(tmp_path: Path, shop: Path) -> tuple[Path, list[tuple[str, str, str, str]]]:
    rows = [(f"q{i}", "shop" if i < 3 else "shop2", q, gold) for i, (q, gold) in enumerate(cases.QUESTIONS[:6])]
    return cases.write_dataset(tmp_path / "data", {"shop": shop, "shop2": shop}, rows), rows


@pytest.mark.slow
def test_sqlite_file_missing_mid_run(shop_copy, tmp_path, ledger):
    root, rows = _two_db_dataset(tmp_path, shop_copy)
    shop, shop2 = (root / "dev_databases" / d / f"{d}.sqlite" for d in ("shop", "shop2"))
    away = tmp_path / "away"
    away.mkdir()

    def before(q):
        if q.question_id == "q1":  # shop's engine is already open; the file is gone from under it
            shop.rename(away / "shop.sqlite")
        if q.question_id == "q3":  # shop2 is opened only now
            shop2.rename(away / "shop2.sqlite")
        if q.question_id == "q5":
            (away / "shop2.sqlite").rename(shop2)

    script = cases.oracle({q: gold for _, _, q, gold in rows})
    config = _config(tmp_path / "c.yaml", root, kb=False)
    summary, records = _eval(config, tmp_path / "out", script, before)
    assert summary["finished"] == 6
    assert records["q0"]["correct"] and records["q5"]["correct"]  # q5: opening shop2 was tried again
    for qid in ("q1", "q2"):  # answered from the open file; the scorer could not open it
        assert records[qid]["status"] == "gold_error" and "cannot open the database" in records[qid]["detail"]
        assert records[qid]["exception"] is None
    for qid in ("q3", "q4"):
        assert "ConnectionFailed" in records[qid]["exception"] and "does not exist" in records[qid]["exception"]
    ledger.fault("SQLite file deleted under an open engine", "answered; scoring: per-question gold_error")
    ledger.fault("SQLite file missing when first opened", "per-question error, then reopened on the next question")

    # The file is back: resuming with --retry-errors redoes exactly the questions that raised.
    (away / "shop.sqlite").rename(shop)
    summary, records = _eval(config, tmp_path / "out", script, retry_errors=True)
    assert summary["exceptions"] == 0 and records["q3"]["correct"] and records["q4"]["correct"]
    assert len((tmp_path / "out" / "results.jsonl").read_text().splitlines()) == 6


def _lock(path: Path, seconds: float) -> threading.Timer:
    """Hold an exclusive lock on ``path`` for ``seconds``, as a writing application would."""
    locker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    locker.execute("BEGIN EXCLUSIVE")

    def release():
        locker.execute("ROLLBACK")
        locker.close()

    timer = threading.Timer(seconds, release)
    timer.start()
    return timer


@pytest.mark.slow
def test_sqlite_locked_mid_run(shop_copy, tmp_path, ledger, capsys, monkeypatch):
    root, rows = _two_db_dataset(tmp_path, shop_copy)
    shop, shop2 = (root / "dev_databases" / d / f"{d}.sqlite" for d in ("shop", "shop2"))
    timers = []

    def before(q):
        if q.question_id == "q1":  # shorter than SQLite's busy timeout (5 s): waited out
            timers.append(_lock(shop, 1.5))
        if q.question_id == "q3":  # longer: opening shop2 fails; the next question opens it
            timers.append(_lock(shop2, 6.5))

    script = cases.oracle({q: gold for _, _, q, gold in rows})
    summary, records = _eval(_config(tmp_path / "c.yaml", root, kb=False), tmp_path / "out", script, before)
    for t in timers:
        t.join()
    assert summary["finished"] == 6
    assert "database is locked" in records["q3"]["exception"]
    assert all(records[q]["correct"] for q in ("q0", "q1", "q2", "q4", "q5")), records
    ledger.fault("SQLite locked 1.5 s mid-run", "waited, answered")
    ledger.fault("SQLite locked 6.5 s when opened", "per-question error, next question answered")

    # `ask` on a locked file: one clear line and exit code 2 after the busy timeout.
    from reflect_sql.cli import main
    from reflect_sql.lm import factory
    from reflect_sql.lm.scripted import ScriptedLM

    monkeypatch.setattr(factory, "configure_lms", lambda s: (ScriptedLM(script), ScriptedLM(script)))
    timer = _lock(shop, 7)
    capsys.readouterr()
    code = main(["ask", "--db", str(shop), "--", rows[0][2]])
    err = capsys.readouterr().err
    timer.join()
    assert code == 2 and "database is locked" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    ledger.fault("SQLite locked during `ask`", "exit 2, one line")


# --- PostgreSQL restarts, or goes away, mid-evaluation ---------------------------------------------


@pytest.fixture
def pg_restartable(pg_url, pg_reader, shop_db):
    """The shop data in a database of its own, so that ending "every backend" of it (what a restart
    does to clients) and refusing connections to it touch nobody else's sessions on the server."""
    import psycopg
    from psycopg import sql

    from reflect_sql.db.loader import copy_sqlite_to_postgres, schema_url

    name = f"reliability_restart_{os.getpid()}"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(pg_url)
    db_url = urlunsplit(parts._replace(path=f"/{name}"))
    copy_sqlite_to_postgres(shop_db, db_url, "shop")

    class Server:
        url = pg_reader(schema_url(db_url, "shop"))

        def restart(self) -> int:
            """End every backend of this database but our own, as a server restart would."""
            with psycopg.connect(pg_url, autocommit=True) as admin:
                return len(admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                         "WHERE datname = %s AND pid <> pg_backend_pid()", [name]).fetchall())

        def down(self) -> None:
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS false").format(sql.Identifier(name)))
            self.restart()

        def up(self) -> None:
            with psycopg.connect(pg_url, autocommit=True) as admin:
                admin.execute(sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS true").format(sql.Identifier(name)))

    server = Server()
    yield server
    server.up()
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_restart_mid_evaluation(pg_restartable, shop_copy, tmp_path, ledger, capsys, monkeypatch):
    import dspy

    from reflect_sql.db import open_engine
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.runner import run_eval
    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.programs import build_program
    from reflect_sql.programs.retriever import SchemaRetriever

    rows = [(f"q{i}", "shop", q, gold) for i, (q, gold) in enumerate(cases.QUESTIONS[:8])]
    rows[7] = ("q7", "shop", "How many order triples are there?", cases.SLOW_SQL)
    root = cases.write_dataset(tmp_path / "data", {"shop": shop_copy}, rows)
    config = load_config(_config(tmp_path / "c.yaml", root, kb=False))
    settings = config.settings
    script = cases.oracle({q: gold for _, _, q, gold in rows})
    engine = open_engine(pg_restartable.url, settings)
    dspy.configure(adapter=make_adapter(settings))
    program = build_program(settings, engine, SchemaRetriever(engine.introspect()),
                            generator_lm=ScriptedLM(script), judge_lm=ScriptedLM(script))
    ended = []
    real_execute = engine.execute

    def restart_then_execute(sql, *args, **kwargs):  # the restart lands as the query is sent
        engine.execute = real_execute
        ended.append(pg_restartable.restart())
        return real_execute(sql, *args, **kwargs)

    def program_for(q):
        if q.question_id == "q2":
            ended.append(pg_restartable.restart())
        if q.question_id == "q4":
            engine.execute = restart_then_execute
        if q.question_id == "q5":
            pg_restartable.down()
        if q.question_id == "q6":
            pg_restartable.up()
        return program

    out = tmp_path / "out"
    try:
        summary = run_eval(config, out, program_for, progress=False)
    finally:
        pg_restartable.up()
        engine.close()
    records = _records(out)
    assert summary["finished"] == 8 and len(ended) == 2 and all(n >= 1 for n in ended), ended
    for qid in ("q0", "q1", "q2", "q3", "q4", "q6"):
        assert records[qid]["correct"], records[qid]
    assert "ConnectionFailed" in records["q5"]["exception"] and "not currently accepting connections" in records["q5"]["exception"]
    assert records["q7"]["error"].startswith("timeout:")
    ledger.fault("PostgreSQL restart between questions", "reconnected, answered")
    ledger.fault("PostgreSQL restart as a query is sent", "reconnected, answered")
    ledger.fault("PostgreSQL refusing connections", "per-question error, next question answered")
    ledger.fault("query past its timeout (postgres)", "per-question error (timeout)")

    # `ask` while the server is away: one clear line, exit code 2.
    from reflect_sql.cli import main
    from reflect_sql.lm import factory

    monkeypatch.setattr(factory, "configure_lms", lambda s: (ScriptedLM(script), ScriptedLM(script)))
    pg_restartable.down()
    try:
        capsys.readouterr()
        code = main(["ask", "--db", pg_restartable.url, "--", rows[0][2]])
        err = capsys.readouterr().err
    finally:
        pg_restartable.up()
    assert code == 2 and "not currently accepting connections" in err and len(err.strip().splitlines()) == 1
    ledger.fault("PostgreSQL away during `ask`", "exit 2, one line")


@pytest.mark.postgres
@pytest.mark.slow
def test_postgres_restart_during_a_running_query_is_retried(pg_restartable, ledger):
    """A connection killed while a query runs is replaced and the read-only query run again."""
    from reflect_sql.db import open_engine
    from reflect_sql.settings import Settings

    engine = open_engine(pg_restartable.url, Settings(query_timeout_s=30))
    sql = "SELECT count(*) FROM orders a, orders b, (SELECT id FROM orders LIMIT 20) c WHERE a.amount >= 0"
    ended = []
    timer = threading.Timer(0.3, lambda: ended.append(pg_restartable.restart()))
    try:
        timer.start()
        started = time.perf_counter()
        result = engine.execute(sql)
        seconds = time.perf_counter() - started
    finally:
        timer.cancel()
        engine.close()
    assert result.rows == [(1200 * 1200 * 20,)]
    assert ended and ended[0] >= 1 and seconds > 0.3, "the restart did not land while the query ran"
    ledger.fault("PostgreSQL restart during a running query", f"retried, answered in {seconds:.1f} s")
