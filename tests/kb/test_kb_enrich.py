"""Enrichment with provenance, history and rollback; a refused enrichment changes nothing."""
from __future__ import annotations

import pytest

from reflect_sql.db.base import QueryResult
from reflect_sql.errors import UserError
from reflect_sql.kb.build import build_kb
from reflect_sql.kb.enrich import enrich, history, rollback
from reflect_sql.kb.retrieve import Retriever
from reflect_sql.kb.embedding import embed
from reflect_sql.kb.store import open_store
from reflect_sql.kb.values import ValueIndex
from reflect_sql.kb.versions import KBDir

QUESTION = "Which students take the heat course?"
SQL = ("SELECT s.full_name FROM student s JOIN enrollment e ON e.student_ref = s.student_id "
       "JOIN course c ON c.course_id = e.course_ref WHERE c.title = 'Thermodynamics'")
RESULT = QueryResult(columns=["full_name"], rows=[("Nguyễn Văn An",), ("Marie Curie",)])
PASSED = {"retrieval": {"score": 7.2, "threshold": 4.0}, "syntax": True,
          "semantic": {"score": 8.0, "threshold": 5.0}, "entailment": {"passed": True}}


@pytest.fixture()
def kb_dir(school_db, tmp_path, settings):
    build_kb(str(school_db), tmp_path / "kb", settings)
    return tmp_path / "kb"


def _state(kb_dir):
    """Everything on disk that an enrichment could touch (chroma is checked through the manifest)."""
    files = ["kb.json", "log.jsonl", "index.json"]
    return ({f: (kb_dir / f).read_bytes() for f in files},
            sorted(p.name for p in (kb_dir / "versions").iterdir()),
            ValueIndex(kb_dir / "values.sqlite").stored_fingerprint("aliases"))


def test_enrichment_history_rollback_restores_exactly(kb_dir, settings):
    directory = KBDir(kb_dir)
    original = directory.load()
    result = enrich(kb_dir, QUESTION, SQL, RESULT, PASSED,
                    clarifications={"course.credits": "ECTS credits a course is worth"},
                    aliases={"heat course": ("course.title", "thermodynamics")})
    assert result.accepted and result.version == 2
    assert [c["kind"] for c in result.changes] == ["example", "clarify", "alias"]
    enriched = directory.load()
    assert enriched.examples[0].source == "enrichment"
    assert enriched.examples[0].tables == ["course", "enrollment", "student"]
    assert enriched.column("course", "credits").description_source == "enrichment"
    assert enriched.column("course", "title").aliases == {"heat course": "Thermodynamics"}

    entries = history(kb_dir)
    assert [e["action"] for e in entries] == ["build", "enrich"]
    provenance = entries[1]["provenance"]
    assert provenance["question"] == QUESTION and provenance["sql"] == SQL and provenance["time"]
    assert provenance["judgments"]["semantic"]["score"] == 8.0 and provenance["result"]["rows"] == 2

    retriever = Retriever(kb_dir, settings)
    context = retriever.retrieve("Which students take the heat course?")
    assert context.examples and context.examples[0].sql == SQL
    assert any(v.alias == "heat course" and v.value == "Thermodynamics" for v in context.values)
    retriever.close()

    restored = rollback(kb_dir, 1)
    assert restored.version == 3
    assert directory.load().content() == original.content()
    assert directory.snapshot(1).content() == directory.load().content()
    assert [e["action"] for e in history(kb_dir)] == ["build", "enrich", "rollback"]
    # The derived indexes follow, on either store: no example document, no alias.
    assert open_store(kb_dir).example_hits(embed(["Which students take the heat course?"])[0], 5) == []
    assert ValueIndex(kb_dir / "values.sqlite").lookup("the heat course") == []
    # And the rollback itself can be undone.
    assert rollback(kb_dir, 2).content() == enriched.content()
    with pytest.raises(UserError, match="no version 9"):
        rollback(kb_dir, 9)


def test_a_retriever_enriches_its_own_kb(kb_dir, settings):
    retriever = Retriever(kb_dir, settings)
    try:
        result = retriever.enrich(QUESTION, SQL, RESULT, PASSED, evidence="heat course means Thermodynamics")
    finally:
        retriever.close()
    assert result.accepted and result.version == 2
    (entry,) = [e for e in history(kb_dir) if e["action"] == "enrich"]
    assert entry["provenance"]["evidence"] == "heat course means Thermodynamics"
    assert KBDir(kb_dir).load().examples[0].sql == SQL


@pytest.mark.parametrize("case", ["failed judgment", "no judgments", "not executed", "unknown table",
                                  "alias to a missing value"])
def test_refused_enrichment_changes_nothing(kb_dir, case):
    kwargs = dict(question=QUESTION, sql=SQL, result=RESULT, judgments=dict(PASSED))
    if case == "failed judgment":
        kwargs["judgments"]["entailment"] = {"score": 2.0, "threshold": 3.0}
    elif case == "no judgments":
        kwargs["judgments"] = {}
    elif case == "not executed":
        kwargs["result"] = None
    elif case == "unknown table":
        kwargs["sql"] = "SELECT nickname FROM pupil"
    else:
        kwargs["aliases"] = {"heat course": ("course.title", "Quantum Cooking")}
    before = _state(kb_dir)
    result = enrich(kb_dir, **kwargs)
    assert not result.accepted and result.reasons and result.version is None
    assert _state(kb_dir) == before


def test_a_build_waits_for_a_change_in_progress(kb_dir, school_db, tmp_path, settings):
    """A rebuild that commits a new version must not interleave with an enrichment or rollback."""
    import threading

    glossary = tmp_path / "glossary.yaml"
    glossary.write_text("terms:\n  heat course: the Thermodynamics course\n", encoding="utf-8")
    reports = []
    builder = threading.Thread(target=lambda: reports.append(
        build_kb(str(school_db), kb_dir, settings, glossary=glossary)))
    with KBDir(kb_dir).locked():
        builder.start()
        builder.join(timeout=1.0)
        assert builder.is_alive() and not reports  # held off while the change runs
        assert KBDir(kb_dir).load().version == 1
    builder.join(timeout=60)
    assert reports and reports[0].new_version and reports[0].version == 2
    assert [e["action"] for e in history(kb_dir)] == ["build", "build"]
