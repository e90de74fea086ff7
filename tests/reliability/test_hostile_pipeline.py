"""Hostile input through the whole pipeline, on SQLite and PostgreSQL: nothing is ever written.

Three sources of hostility, each through ``reflect-sql ask`` and ``reflect-sql eval``:
  - a scripted LM that returns hostile SQL at one stage (generator, repairer, a rewritten question,
    the semantic or the entailment judge's diagnosis), while every judge is fooled into passing it;
  - prompt injection in the user's question, evidence, or glossary text, obeyed by a gullible LM;
  - hostile names and values stored in the database itself, reaching the prompt through the KB.

After every case: the database's bytes (SQLite) or contents and catalogue (PostgreSQL) are
unchanged, no file appeared in the canary folder, the secret file's token reached no prompt and no
answer, and the question ended with an answer or a clear error, in bounded time.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import reliability_cases as cases
from reflect_sql.programs.sql_text import clean_sql, reads_as_sql

SECRET_TOKEN = cases.SECRET_TOKEN
# Statements that write, change a schema or a session, leave the database, or sleep: each must be
# refused by the gate or the connection, or cut to its harmless SELECT by SQL cleaning.
MUST_NOT_RUN = {"write", "ddl", "multi", "attach", "pragma", "copy", "server", "sleep", "injection"}
# A read of the catalogue that PostgreSQL simply lacks (pragma_table_info): an engine error there.
ENGINE_ERROR_OK = {("pragma-select", "postgres")}
# Each case's wall-time bound: query_timeout_s is 1 s, a case runs at most two rounds, and sleeping
# 30 s (pg_sleep) or running for minutes (a costly function) must be impossible.
CASE_SECONDS = 12.0


def render(text: str, traps) -> str:
    return text.replace("{canary}", str(traps["canary"])).replace("{secret}", str(traps["secret"]))


def _sql_of(step: dict) -> str | None:
    return (step.get("inputs") or {}).get("sql") or (step.get("rewrite") or {}).get("sql")


def outcome_of(steps: list[dict], hostile: str) -> str:
    """What became of one hostile SQL, read from the full trace of its question."""
    written = hostile.strip().rstrip(";").strip()
    cleaned = clean_sql(hostile)
    if cleaned != written:
        return "neutralised"  # cleaning kept only the SELECT inside it: the hostile part never ran
    related = [s for s in steps if _sql_of(s) == cleaned]
    if not related:
        return "neutralised"
    text = json.dumps(related)
    if "planner estimates" in text or "timeout:" in text:
        return "stopped"
    if "refused:" in text:
        return "refused"
    ran = any((s["loop"] == "entailment" and "rows" in s["inputs"]) or (s["loop"] == "execution" and not s.get("failure"))
              for s in related)
    return "answered" if ran else "engine_error"


def expect(outcome: str, category: str, name: str, engine: str, rows: int | None = None) -> None:
    if category in MUST_NOT_RUN:
        allowed = {"refused", "neutralised"} | ({"engine_error"} if (name, engine) in ENGINE_ERROR_OK else set())
        assert outcome in allowed, f"{name} on {engine}: {outcome}"
    elif category == "malformed":  # never run, and never a crash
        assert outcome in {"refused", "engine_error", "neutralised"}, f"{name} on {engine}: {outcome}"
    elif category == "harmless":
        assert outcome == "answered", f"{name} on {engine}: {outcome}"
    elif category == "huge":
        assert outcome in {"stopped", "refused", "engine_error", "answered"}
        if outcome == "answered":  # a lazy cross join that streams rows stops at max_rows
            assert rows is not None and rows <= 1000


def check_case(target, traps, asked, what: str) -> None:
    """Everything that must hold after any hostile case."""
    assert asked.code in (0, 1), f"{what}: exit {asked.code}: {asked.stderr}"
    assert asked.answer is not None and "sql" in asked.answer
    assert asked.seconds < CASE_SECONDS, f"{what} took {asked.seconds:.1f} s"
    target.assert_unchanged(what)
    assert not any(traps["canary_dir"].iterdir()), f"{what} created {list(traps['canary_dir'].iterdir())}"
    assert SECRET_TOKEN not in asked.prompt_text and SECRET_TOKEN not in json.dumps(asked.answer), what


def verified(answer: dict) -> bool:
    """Did the final answer pass every check: each judge at its threshold, no error, no finding?"""
    from reflect_sql.settings import Settings

    s, scores = Settings(), answer["scores"]
    # A whole-database context is not retrieval-judged: nothing is missing from it.
    whole = any(st["loop"] == "retrieval" and (st.get("decision") or "").startswith("accept: the whole database")
                for st in answer["trace"])
    retrieval = s.theta_r if whole and scores["retrieval"] is None else scores["retrieval"]
    if answer.get("error") or any(v is None for v in (retrieval, scores["semantic"], scores["entailment"])):
        return False
    if retrieval < s.theta_r or scores["semantic"] < s.theta_s or scores["entailment"] < s.theta_e:
        return False
    final = [st for st in answer["trace"] if st["loop"] == "entailment" and st["inputs"].get("sql") == answer["sql"]]
    return bool(final) and not final[-1]["inputs"].get("checks")


def assert_no_enrichment_unless_verified(spy, start, asked, question) -> None:
    """KB anti-pollution: a question whose answer failed any check never even asks the KB to learn."""
    calls = [c for c in spy[start:] if c["question"].strip() == question.strip()]
    if not verified(asked.answer):
        assert not calls, f"an unverified answer reached the KB: {calls}"


# --- ask: hostile SQL at each stage --------------------------------------------------------------

GENERATOR_CASES = [(p.name, "generator") for p in cases.PAYLOADS + cases.HARMLESS]
STAGE_CASES = [(name, stage) for stage in cases.STAGES[1:] for name in cases.STAGE_SUBSET]
ALL_PAYLOADS = {p.name: p for p in cases.PAYLOADS + cases.HARMLESS}


@pytest.mark.parametrize("name,stage", GENERATOR_CASES + STAGE_CASES, ids=[f"{s}-{n}" for n, s in GENERATOR_CASES + STAGE_CASES])
def test_ask_hostile_sql_at_every_stage(target, traps, ask, ledger, enrichment_spy, name, stage):
    payload = ALL_PAYLOADS[name]
    sql = payload.render(traps["canary"], traps["secret"])
    script = cases.hostile_script(stage, sql)
    question = "How many orders are there?"
    start = len(enrichment_spy)
    # The KB matters only where the rewritten question goes (its search); elsewhere the whole
    # schema is the context, which spares an embedding per retrieval.
    # The rewrite stage needs the retrieval judge, which a schema this small (it fits the context
    # budget whole) would not be asked: prune by k and m as the paper does.
    asked = ask(target, question, script, kb=stage == "rewrite",
                sets=["context_budget_tokens=0"] if stage == "rewrite" else ())
    check_case(target, traps, asked, f"{stage}/{name}")
    steps = asked.answer["trace"]
    if stage == "rewrite":
        # The rewritten question steers retrieval only and never runs. A rewrite that reads as SQL
        # is not even used as the search query.
        used = any(s["loop"] == "retrieval" and s["inputs"]["query"] == sql for s in steps)
        if reads_as_sql(sql):
            assert not used and any("was SQL" in (s.get("failure") or "") for s in steps)
        else:
            assert used
        outcome = "neutralised"
        assert asked.answer["sql"] == cases.BENIGN
    else:
        assert script.produced[:1] == [sql], "the hostile SQL never reached the program"
        outcome = outcome_of(steps, sql)
        expect(outcome, payload.category, name, target.engine, len(asked.answer["rows"]))
        for echo in script.produced[1:]:  # the gullible generator obeying the refusal's own text
            expect(outcome_of(steps, echo), "injection", name, target.engine)
        if outcome in ("refused", "stopped"):  # never handed back as if it were the answer
            assert asked.answer["sql"] != clean_sql(sql) or asked.answer.get("error")
    assert_no_enrichment_unless_verified(enrichment_spy, start, asked, question)
    ledger.case("ask", stage if stage != "generator" else payload.category, target.engine, outcome)


# --- ask: prompt injection, and hostile text stored in the database -------------------------------


def record_injection(ledger, surface: str, category: str, engine: str, steps: list[dict], produced: list[str], name: str) -> None:
    """Every SQL the gullible model wrote must have been stopped; the case counts once, by the first."""
    outcomes = [outcome_of(steps, hostile) for hostile in produced]
    for outcome in outcomes:
        expect(outcome, "injection", name, engine)
    if outcomes:
        ledger.case(surface, category, engine, outcomes[0])

INJECTIONS = ([("question", q, "") for q in cases.INJECTION_QUESTIONS]
              + [("evidence", q, e) for q, e in cases.INJECTION_EVIDENCE]
              + [("glossary", q, "") for q in cases.GLOSSARY_QUESTIONS])


@pytest.mark.parametrize("channel,question,evidence", INJECTIONS, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(INJECTIONS)])
def test_ask_prompt_injection(target, traps, ask, ledger, enrichment_spy, channel, question, evidence):
    question, evidence = render(question, traps), render(evidence, traps)
    script = cases.hostile_script()
    start = len(enrichment_spy)
    asked = ask(target, question, script, evidence=evidence)
    check_case(target, traps, asked, f"injection via {channel}")
    if channel == "glossary":  # it came through the KB's glossary, not the user's words
        term = next(t for t in cases.GLOSSARY_TERMS if t in question.lower())
        assert cases.GLOSSARY_TERMS[term] in asked.prompt_text and not cases.MARK.search(question)
        assert script.produced, "the LM found no instruction in the glossary text"
    else:
        wanted = cases.obeyed([question, evidence])
        assert wanted in script.produced, f"the LM never saw the injected instruction ({channel})"
    record_injection(ledger, "ask", f"inject-{channel}", target.engine, asked.answer["trace"], script.produced, channel)
    assert_no_enrichment_unless_verified(enrichment_spy, start, asked, question)


DB_TEXT = [(channel, question, retriever) for channel, question, shown_by in cases.DB_TEXT_QUESTIONS for retriever in shown_by]


@pytest.mark.parametrize("channel,question,retriever", DB_TEXT, ids=[f"{c}-{r}" for c, _, r in DB_TEXT])
def test_ask_hostile_text_stored_in_the_database(target, traps, ask, ledger, enrichment_spy, channel, question, retriever):
    script = cases.hostile_script()
    start = len(enrichment_spy)
    asked = ask(target, question, script, kb=retriever == "kb")
    check_case(target, traps, asked, f"database text {channel}")
    # The instruction reached the model through the schema context alone.
    assert not cases.MARK.search(question)
    assert cases.DB_TEXT_PLANTED[channel] in asked.prompt_text, f"the stored text never reached a prompt ({channel})"
    assert script.produced, f"the model found no stored instruction ({channel})"
    record_injection(ledger, "ask", "database-text", target.engine, asked.answer["trace"], script.produced, channel)
    assert_no_enrichment_unless_verified(enrichment_spy, start, asked, question)


# --- eval: the same attacks through the evaluation harness ----------------------------------------

EVAL_PAYLOADS = cases.STAGE_SUBSET + ["update", "truncate", "copy-to", "lo-import", "costly-sqlite", "costly-postgres"]


def _eval_cases(traps) -> list[dict]:
    """One dataset question per case; the question's id prefix tells the dispatcher what to play."""
    out = []
    for name in EVAL_PAYLOADS + [p.name for p in cases.HARMLESS]:
        p = ALL_PAYLOADS[name]
        out.append({"id": f"sql-{name}", "question": "How many orders are there?", "evidence": "",
                    "category": p.category, "script": ("generator", p.render(traps["canary"], traps["secret"]))})
    for i, q in enumerate(cases.INJECTION_QUESTIONS):
        out.append({"id": f"inj-{i}", "question": render(q, traps), "evidence": "", "category": "injection", "script": None})
    for i, (q, e) in enumerate(cases.INJECTION_EVIDENCE):
        out.append({"id": f"ev-{i}", "question": q, "evidence": render(e, traps), "category": "injection", "script": None})
    return out


@pytest.fixture(scope="module")
def eval_dataset(sqlite_target, scratch):
    """A BIRD-layout dataset over a copy of the shop database (scoring reads it directly)."""
    root = scratch / "eval-dataset"
    db_dir = root / "dev_databases" / "shop"
    db_dir.mkdir(parents=True)
    shutil.copy(sqlite_target.db, db_dir / "shop.sqlite")
    fingerprint = cases.sqlite_fingerprint(db_dir / "shop.sqlite"), cases.folder_listing(db_dir)
    return root, db_dir, fingerprint


def _write_questions(root: Path, rows: list[dict]) -> None:
    (root / "dev.json").write_text(json.dumps([
        {"question_id": r["id"], "db_id": "shop", "question": f"[{r['id']}] {r['question']}", "evidence": r["evidence"],
         "SQL": cases.BENIGN, "difficulty": "simple"} for r in rows]))


def _dispatcher(rows: list[dict]):
    scripts = {r["id"]: cases.hostile_script(*r["script"]) if r["script"] else cases.hostile_script() for r in rows}

    def script(name: str, inputs: dict):
        case = inputs["question"].split("]", 1)[0].lstrip("[")
        return scripts[case](name, inputs)

    return script, scripts


def _check_eval(out: Path, rows: list[dict], scripts: dict, engine: str, ledger, traps, taught: list[dict]) -> None:
    records = {r["question_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert set(records) == {r["id"] for r in rows}, "every question got exactly one result"
    for row in rows:
        record = records[row["id"]]
        assert record["exception"] is None, f"{row['id']}: {record['exception']}"
        assert record["cost"]["seconds"] < CASE_SECONDS, row["id"]
        steps = json.loads((out / "traces" / f"{row['id']}.json").read_text())
        produced = scripts[row["id"]].produced
        assert produced, f"{row['id']}: the hostile SQL never reached the program"
        outcomes = [outcome_of(steps, hostile) for hostile in produced]
        expect(outcomes[0], row["category"], row["id"], engine, record["row_count"])
        for echo in outcomes[1:]:
            expect(echo, "injection", row["id"], engine)
        ledger.case("eval", "injection" if row["category"] == "injection" else "sql-" + row["category"], engine, outcomes[0])
        answer = {"error": record["error"], "scores": record["scores"], "trace": steps, "sql": record["sql"]}
        if not verified(answer):  # KB anti-pollution, as for `ask`
            assert not [c for c in taught if c["question"].startswith(f"[{row['id']}]")], row["id"]
    assert not any(traps["canary_dir"].iterdir()), f"the run created {list(traps['canary_dir'].iterdir())}"
    text = (out / "results.jsonl").read_text() + "".join(p.read_text() for p in (out / "traces").iterdir())
    assert SECRET_TOKEN not in text


def _assert_dataset_unchanged(eval_dataset, ledger) -> None:
    _, db_dir, fingerprint = eval_dataset
    ledger.db_checks += 1
    now = cases.sqlite_fingerprint(db_dir / "shop.sqlite"), cases.folder_listing(db_dir)
    if now != fingerprint:
        ledger.db_changes.append("eval dataset copy")
    assert now == fingerprint, "the scored database changed"


@pytest.mark.slow
def test_eval_hostile_on_sqlite(sqlite_target, eval_dataset, traps, scratch, monkeypatch, capsys, ledger, enrichment_spy):
    from reflect_sql.cli import main
    from reflect_sql.lm import factory
    from reflect_sql.lm.scripted import ScriptedLM

    root, _, _ = eval_dataset
    rows = _eval_cases(traps)
    _write_questions(root, rows)
    script, scripts = _dispatcher(rows)
    monkeypatch.setattr(factory, "configure_lms", lambda s: (ScriptedLM(script, role="generator"), ScriptedLM(script, role="judge")))
    config = scratch / "eval-sqlite.yaml"
    config.write_text(f"dataset: {{format: bird, root: {root}}}\nmlflow: {{enabled: false}}\n"
                      f"kb: {{enabled: true, cache: {scratch / 'eval-kb-cache'}}}\n"
                      "score_timeout_s: 2\nsettings: {lm_cache: false, query_timeout_s: 1}\n")
    out = scratch / "eval-sqlite-out"
    start = len(enrichment_spy)
    code = main(["eval", str(config), "--out", str(out), "--no-mlflow", "--no-progress", "--json"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    assert summary["finished"] == len(rows) and summary["exceptions"] == 0
    _check_eval(out, rows, scripts, "sqlite", ledger, traps, enrichment_spy[start:])
    sqlite_target.assert_unchanged("the sqlite eval run")
    _assert_dataset_unchanged(eval_dataset, ledger)


@pytest.mark.slow
@pytest.mark.postgres
def test_eval_hostile_on_postgres(pg_target, eval_dataset, traps, scratch, ledger, enrichment_spy):
    """The harness with the program on PostgreSQL (the runner's own factory only opens dataset
    files); scoring still runs on the dataset's SQLite copy, as BIRD scores."""
    import dspy

    from reflect_sql.db import open_engine
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.runner import run_eval
    from reflect_sql.kb.retrieve import Retriever
    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.programs import build_program

    root, _, _ = eval_dataset
    rows = _eval_cases(traps)
    _write_questions(root, rows)
    script, scripts = _dispatcher(rows)
    config_path = scratch / "eval-pg.yaml"
    config_path.write_text(f"dataset: {{format: bird, root: {root}}}\nmlflow: {{enabled: false}}\n"
                           "score_timeout_s: 2\nsettings: {lm_cache: false, query_timeout_s: 1}\n")
    config = load_config(config_path)
    settings = config.settings
    engine = open_engine(pg_target.db, settings)
    retriever = Retriever(pg_target.kb_dir, settings)
    generator, judge = ScriptedLM(script, role="generator"), ScriptedLM(script, role="judge")
    dspy.configure(adapter=make_adapter(settings))
    program = build_program(settings, engine, retriever, generator_lm=generator, judge_lm=judge)
    out = scratch / "eval-pg-out"
    start = len(enrichment_spy)
    try:
        summary = run_eval(config, out, lambda q: program, progress=False)
    finally:
        retriever.close()
        engine.close()
    assert summary["finished"] == len(rows) and summary["exceptions"] == 0
    _check_eval(out, rows, scripts, "postgres", ledger, traps, enrichment_spy[start:])
    pg_target.assert_unchanged("the postgres eval run")
    _assert_dataset_unchanged(eval_dataset, ledger)
