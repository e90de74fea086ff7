"""Fixtures for the program tests: a tiny SQLite database, settings, and a scripted LM whose replies
are keyed by signature, so a test can say "the semantic judge scores low, then high"."""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

from reflect_sql.db import open_engine
from reflect_sql.lm.scripted import ScriptedLM
from reflect_sql.kb.context import TABLES_AND_COLUMNS
from reflect_sql.programs.retriever import SchemaRetriever
from reflect_sql.settings import Settings

sys.path.insert(0, str(Path(__file__).parent))  # for `paper_settings`, shared by the test modules
from paper_settings import Settings as PaperSettings  # noqa: E402

STORES_SQL = """
CREATE TABLE regions (id INTEGER PRIMARY KEY, name TEXT NOT NULL);
CREATE TABLE stores (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    region_id INTEGER REFERENCES regions(id),
    orders INTEGER NOT NULL,
    returns INTEGER NOT NULL
);
INSERT INTO regions VALUES (1, 'Coast'), (2, 'Inland');
INSERT INTO stores VALUES (1, 'North', 1, 10, 3), (2, 'South', 2, 0, 0), (3, 'East', 1, 4, 1);
"""

CRITERIA = ("column_consistency", "granularity", "join_consistency", "query_logic")
RATIONALES = ("column_rationale", "granularity_rationale", "join_rationale", "logic_rationale")


def retrieval(r: int, c: int, rewritten: str = "", missing: list[str] | None = None) -> dict:
    return {"missing_aspects": missing or [], "relevance": r, "completeness": c, "rewritten_question": rewritten or "same"}


def semantic(score: int | tuple[int, int, int, int], diagnosis: str = "none") -> dict:
    scores = score if isinstance(score, tuple) else (score,) * 4
    out = {field: s for field, s in zip(CRITERIA, scores)}
    out.update({field: f"{field} looks fine" for field in RATIONALES})
    out["diagnosis"] = diagnosis
    return out


def entailment(e_schema: int, e_data: int, diagnosis: str = "none") -> dict:
    return {"e_schema": e_schema, "e_data": e_data, "diagnosis": diagnosis}


PASSING = {
    "RetrievalJudge": retrieval(9, 9),
    "SemanticJudge": semantic(9),
    "EntailmentJudge": entailment(5, 5),
}


class Script:
    """Replies per signature name. Each reply is a field dict, a raw string (sent verbatim), or a
    callable ``inputs -> reply``; a list is answered in order and its last reply then repeats.
    Judges not given pass by default (``PASSING``); the generator and repairer must be scripted."""

    def __init__(self, **replies: Any):
        self.replies = {**PASSING, **replies}
        self.position: dict[str, int] = {}

    def __call__(self, name: str, inputs: dict) -> Any:
        if name not in self.replies:
            raise AssertionError(f"unscripted call to {name}")
        replies = self.replies[name]
        if isinstance(replies, list):
            i = self.position.get(name, 0)
            self.position[name] = i + 1
            replies = replies[min(i, len(replies) - 1)]
        return replies(inputs) if callable(replies) else replies


def calls_by_signature(lm: ScriptedLM) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, _ in lm.calls:
        out[name] = out.get(name, 0) + 1
    return out


def inputs_of(lm: ScriptedLM, name: str) -> list[dict]:
    return [inputs for n, inputs in lm.calls if n == name]


@pytest.fixture
def make_db(tmp_path) -> Callable[[str], str]:
    def make(sql: str = STORES_SQL, name: str = "shop.sqlite") -> str:
        path = tmp_path / name
        con = sqlite3.connect(path)
        con.executescript(sql)
        con.commit()
        con.close()
        return str(path)

    return make


@pytest.fixture
def db_path(make_db) -> str:
    return make_db()


@pytest.fixture
def engine(db_path):
    with open_engine(db_path, Settings()) as e:
        yield e


class RecordingRetriever(SchemaRetriever):
    """The whole-schema retriever that remembers each request and can play a KB for enrichment.

    Its contexts say they were pruned, as a KB's over a schema beyond the budget would: the loop
    tests drive the retrieval judge, which is not asked about a whole database. With ``grows``
    each (k, m) gives another context, as a KB's wider search would (a last line names them);
    without it every widening finds nothing new."""

    def __init__(self, schema, enrich_error: Exception | None = None, grows: bool = True):
        super().__init__(schema)
        self.grows = grows
        self.requests: list[tuple[str, int, int]] = []
        self.enriched: list[dict] = []
        self.enrich_error = enrich_error

    def retrieve(self, question: str, k: int, m: int, evidence: str = ""):
        self.requests.append((question, k, m))
        context = super().retrieve(question, k, m, evidence)
        context.pruned = TABLES_AND_COLUMNS
        if self.grows:
            whole = context.render
            context.render = lambda: f"{whole()}\n-- search depth: {k} tables, {m} columns"
        return context

    def enrich(self, question, sql, result, judgments):
        if self.enrich_error is not None:
            raise self.enrich_error
        self.enriched.append({"question": question, "sql": sql, "result": result, "judgments": judgments})
        return {"version": len(self.enriched)}


@pytest.fixture
def retriever(engine) -> RecordingRetriever:
    return RecordingRetriever(engine.introspect())


@pytest.fixture
def helpers():
    """Module-level helpers, handed to tests as a namespace (importlib mode cannot import conftest)."""
    import types

    return types.SimpleNamespace(
        Script=Script, ScriptedLM=ScriptedLM, retrieval=retrieval, semantic=semantic, entailment=entailment,
        calls_by_signature=calls_by_signature, inputs_of=inputs_of, RecordingRetriever=RecordingRetriever,
        Settings=PaperSettings,
    )


def run_program(engine, retriever, script, settings: Settings | None = None, mode: str = "reflect",
                question: str = "What is the return rate of each store?", evidence: str = ""):
    """Build the program, answer one question on a scripted LM; returns (prediction, lm)."""
    import dspy

    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.programs import build_program

    settings = settings or PaperSettings()
    lm = ScriptedLM(script)
    program = build_program(settings, engine, retriever, mode=mode)
    # The adapter the CLI uses, so json_adapter_fallback decides whether a bad reply is retried.
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        prediction = program(question=question, evidence=evidence)
    return prediction, lm


def runner(engine, retriever):
    """``run_program`` bound to one engine and retriever: the tests pass only script and settings."""
    def go(script, settings=None, **kwargs):
        return run_program(engine, retriever, script, settings, **kwargs)

    return go


@pytest.fixture
def run(engine, retriever):
    return runner(engine, retriever)


@pytest.fixture
def static_retriever(engine) -> RecordingRetriever:
    """A retriever whose wider searches find nothing new."""
    return RecordingRetriever(engine.introspect(), grows=False)


@pytest.fixture
def run_static(engine, static_retriever):
    return runner(engine, static_retriever)
