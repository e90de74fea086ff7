"""Several threads asking questions against one KB while enrichment writes to it: no corruption,
enrichment changes serialised (one version each, none lost), and the history consistent."""
from __future__ import annotations

import json
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import reliability_cases as cases

ASKERS = 4
DIRECT_WRITES = 8


@pytest.mark.slow
def test_threads_ask_while_enrichment_writes(sqlite_target, tmp_path, ledger, enrichment_spy):
    import dspy

    from reflect_sql.db import open_engine
    from reflect_sql.db.base import QueryResult
    from reflect_sql.kb.build import sync_indexes
    from reflect_sql.kb.documents import documents
    from reflect_sql.kb.enrich import enrich, history
    from reflect_sql.kb.model import KnowledgeBase
    from reflect_sql.kb.retrieve import Retriever
    from reflect_sql.kb.store import open_store as Store
    from reflect_sql.kb.versions import KBDir
    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.programs import build_program
    from reflect_sql.settings import Settings

    kb_dir = tmp_path / "kb"
    shutil.copytree(sqlite_target.kb_dir, kb_dir)
    start_version = KBDir(kb_dir).latest_version()
    start_examples = len(KBDir(kb_dir).load().examples)
    settings = Settings(lm_cache=False, query_timeout_s=5)
    golds = dict(cases.QUESTIONS)
    spy_start = len(enrichment_spy)
    barrier = threading.Barrier(ASKERS + 1)

    def asker(i: int) -> list[dict]:
        questions = [q for j, (q, _) in enumerate(cases.QUESTIONS) if j % ASKERS == i]
        script = cases.oracle(golds)
        engine = open_engine(sqlite_target.db, settings)
        retriever = Retriever(kb_dir, settings)
        program = build_program(settings, engine, retriever, generator_lm=ScriptedLM(script), judge_lm=ScriptedLM(script))
        barrier.wait()
        answers = []
        try:
            with dspy.context(adapter=make_adapter(settings)):
                for q in questions:
                    pred = program(question=q)
                    step = next(s for s in pred.trace if s["loop"] == "enrichment")
                    answers.append({"question": q, "rows": pred.rows, "error": pred.error, "enrichment": step["decision"],
                                    "version": (step.get("rewrite") or {}).get("version")})
        finally:
            retriever.close()
            engine.close()
        return answers

    def writer() -> list[int]:
        barrier.wait()
        versions = []
        for k in range(DIRECT_WRITES):
            sql = f"SELECT count(*) FROM orders WHERE id > {k * 100}"
            result = QueryResult(["count(*)"], [(1200 - k * 100,)])
            outcome = enrich(kb_dir, f"How many orders have an id above {k * 100}?", sql, result,
                             {"retrieval": {"score": 9, "threshold": 4}, "executes": {"passed": True}})
            assert outcome.accepted, outcome.reasons
            versions.append(outcome.version)
        return versions

    with ThreadPoolExecutor(ASKERS + 1) as pool:
        asked = [pool.submit(asker, i) for i in range(ASKERS)]
        written = pool.submit(writer)
        answers = [a for f in asked for a in f.result()]
        direct_versions = written.result()

    # Every question answered, from the database, during the writes.
    assert len(answers) == len(cases.QUESTIONS)
    assert all(a["error"] is None and a["rows"] for a in answers), [a for a in answers if a["error"] or not a["rows"]]

    # Serialised: one new version per accepted change, numbered without gaps or repeats.
    log = history(kb_dir)
    versions = [e["version"] for e in log]
    assert versions == list(range(1, len(log) + 1)), versions
    assert all(e["parent"] == (e["version"] - 1 or None) for e in log)
    taught = [c for c in enrichment_spy[spy_start:] if c["accepted"] and c["kb_dir"] == str(kb_dir)]
    assert len(log) - start_version == len(taught) == len({c["question"] for c in taught})
    assert len(set(direct_versions)) == DIRECT_WRITES
    program_versions = [a["version"] for a in answers if a["enrichment"] == "enriched"]
    assert len(set(program_versions + direct_versions)) == len(program_versions) + DIRECT_WRITES

    # No lost update: the current KB holds every taught example, and every version's snapshot is
    # exactly what the log says was committed.
    directory = KBDir(kb_dir)
    current = directory.load()
    assert len(current.examples) == start_examples + len(taught)
    assert {e.question for e in current.examples} >= {c["question"].strip() for c in taught}
    for entry in log:
        snapshot = json.loads(directory.snapshot_file(entry["version"]).read_text())
        assert KnowledgeBase.from_dict(snapshot).content_hash() == entry["content_hash"], entry["version"]
    assert current.content_hash() == log[-1]["content_hash"] and current.version == log[-1]["version"]
    # The derived indexes followed the last version.
    assert Store(kb_dir).up_to_date(documents(current))
    sync_indexes(kb_dir, current)  # and a resync finds nothing out of place
    assert Store(kb_dir).up_to_date(documents(current))
    ledger.fault(f"{ASKERS} threads asking during {DIRECT_WRITES} direct enrichments",
                 f"{len(answers)} answered, {len(taught)} enrichments serialised as versions "
                 f"{start_version + 1}-{log[-1]['version']}")
