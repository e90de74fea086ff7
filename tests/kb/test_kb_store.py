"""The two vector stores behind one interface: the same similarities, and a KB that moves between
them by a rebuild with the other ``kb_store``."""
from __future__ import annotations

import json
import shutil

import pytest

from reflect_sql.kb.build import build_kb
from reflect_sql.kb.documents import GLOBAL, collection_for_table
from reflect_sql.kb.embedding import embed
from reflect_sql.kb.pgvector_store import PgVectorStore
from reflect_sql.kb.retrieve import Retriever
from reflect_sql.kb.store import ChromaStore, open_store
from reflect_sql.kb.values import VALUES_FILE
from reflect_sql.settings import Settings


@pytest.fixture
def both(school_db, tmp_path, pgvector_url):
    """(chroma settings, pgvector settings, KB dir built on chroma)."""
    chroma = Settings(context_budget_tokens=0)
    pg = Settings(context_budget_tokens=0, kb_store="pgvector", kb_store_url=pgvector_url)
    build_kb(str(school_db), tmp_path / "kb", chroma)
    return chroma, pg, tmp_path / "kb"


def test_a_rebuild_moves_the_kb_to_the_other_store_and_reads_follow_the_manifest(both, school_db):
    chroma, pg, kb_dir = both
    assert isinstance(open_store(kb_dir), ChromaStore)
    query = embed(["Which students take thermodynamics?"])[0]
    on_chroma = {name: open_store(kb_dir).similarities(name, query)
                 for name in (GLOBAL, collection_for_table("student"), collection_for_table("course"))}

    report = build_kb(str(school_db), kb_dir, pg)
    assert report.embedded == 4 + 14 and not report.new_version  # same content, all of it embedded again
    manifest = json.loads((kb_dir / "index.json").read_text())
    assert manifest["store"] == "pgvector" and manifest["url"] == pg.kb_store_url
    store = open_store(kb_dir)  # no settings: the manifest decides
    assert isinstance(store, PgVectorStore)
    for name, expected in on_chroma.items():
        got = store.similarities(name, query)
        assert list(got) == list(expected)  # the same order
        assert all(abs(got[i] - expected[i]) < 1e-5 for i in expected)
    assert list(store.similarities(GLOBAL, query, n=2)) == list(on_chroma[GLOBAL])[:2]
    assert build_kb(str(school_db), kb_dir, pg).embedded == 0  # an unchanged rebuild embeds nothing
    retriever = Retriever(kb_dir, Settings(context_budget_tokens=0))
    assert isinstance(retriever.store, PgVectorStore)
    assert {"student", "course"} <= set(retriever.retrieve("Which students take thermodynamics?", k=3, m=3).tables)
    retriever.close()


def test_each_kb_directory_keeps_its_own_rows(both, school_db, tmp_path):
    _, pg, kb_dir = both
    build_kb(str(school_db), kb_dir, pg)
    copy = tmp_path / "copy"
    shutil.copytree(kb_dir, copy)
    # The copy's rows would be its original's: its manifest is not up to date until it is rebuilt.
    assert not open_store(copy).up_to_date({}) and open_store(copy).similarities(GLOBAL, embed(["x"])[0]) == {}
    assert build_kb(str(school_db), copy, pg).embedded == 4 + 14
    assert len(open_store(copy).similarities(GLOBAL, embed(["x"])[0])) == 4


def test_a_local_server_forgets_the_users_that_died(tmp_path):
    """A process killed before pgserver's exit hook would keep the local server running for ever."""
    import os
    import subprocess
    import sys

    from reflect_sql.kb.pgvector_store import forget_dead_users

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / ".handle_pids.json").write_text(json.dumps([int(dead.stdout), os.getpid()]))
    forget_dead_users(tmp_path)
    assert json.loads((tmp_path / ".handle_pids.json").read_text()) == [os.getpid()]
    empty = tmp_path / "new"
    empty.mkdir()
    forget_dead_users(empty)
    assert list(empty.iterdir()) == []  # initdb refuses a data directory that is not empty


def test_a_warm_retriever_reads_nothing_more_from_chroma_and_answers_alike(school_db, tmp_path, monkeypatch):
    settings = Settings(context_budget_tokens=0)
    build_kb(str(school_db), tmp_path / "kb", settings)
    reads = []
    real = ChromaStore._load
    monkeypatch.setattr(ChromaStore, "_load", lambda self, name: reads.append(name) or real(self, name))
    question = "Which students take thermodynamics?"

    lazy = Retriever(tmp_path / "kb", settings)
    context = lazy.retrieve(question)
    expected = context.render()
    # Only what the question touched: the tables' collection and those of the tables it retrieved.
    assert sorted(reads) == sorted([GLOBAL] + [collection_for_table(t) for t in context.tables])
    assert "dish" not in context.tables
    lazy.close()

    reads.clear()
    warm = Retriever(tmp_path / "kb", settings)
    warm.warm()
    # Every table's collection and the global one, but not the verified examples (chroma queries those).
    assert sorted(reads) == sorted([GLOBAL] + [collection_for_table(t) for t in ("student", "course", "enrollment",
                                                                               "dish")])
    reads.clear()
    assert warm.retrieve(question).render() == expected
    assert reads == []
    warm.close()


def test_a_kb_without_a_value_file_stays_without_one_after_a_warm_up(school_db, tmp_path):
    settings = Settings(context_budget_tokens=0)
    build_kb(str(school_db), tmp_path / "kb", settings)
    values = tmp_path / "kb" / VALUES_FILE
    assert values.is_file()
    values.unlink()
    retriever = Retriever(tmp_path / "kb", settings)
    retriever.warm()
    retriever.close()
    assert not values.is_file()  # a build still sees it missing and rebuilds it
    build_kb(str(school_db), tmp_path / "kb", settings)
    assert values.is_file()


def test_a_pgvector_retriever_warms_and_answers_as_it_did(both, school_db):
    _, pg, kb_dir = both
    build_kb(str(school_db), kb_dir, pg)
    question = "Which students take thermodynamics?"
    lazy = Retriever(kb_dir, pg)
    expected = lazy.retrieve(question).render()
    lazy.close()
    warm = Retriever(kb_dir, pg)
    warm.warm()  # every similarity is a query on the server: nothing to read ahead
    assert warm.store.preload() == 0
    assert warm.retrieve(question).render() == expected
    warm.close()


def test_threads_opening_one_kb_at_once_share_one_client(tmp_path):
    """Threads that open a KB directory together get the one client: chroma's shared system, started
    twice at once, failed in one of them (seen in CI while threads asked and enrichment wrote)."""
    import threading

    from reflect_sql.kb import store

    start = threading.Barrier(8)
    got, errors = [], []

    def open_client():
        start.wait()
        try:
            got.append(store.client(tmp_path))
        except Exception as error:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(error)

    threads = [threading.Thread(target=open_client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 8 and len({id(c) for c in got}) == 1
