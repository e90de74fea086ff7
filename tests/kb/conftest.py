"""Fixtures of the KB tests: a small school database built by hand, and the BIRD superhero KB.

The superhero KB is built once per session (it loads the embedder, ~7 s); tests that change a KB
build their own from the small database.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from reflect_sql.settings import Settings

SCHOOL_SQL = """
CREATE TABLE student (student_id INTEGER PRIMARY KEY, full_name TEXT, home_city TEXT, birth_date TEXT);
CREATE TABLE course (course_id INTEGER PRIMARY KEY, title TEXT, credits INTEGER);
-- The bridge: its name and columns share no word with questions about students and courses.
CREATE TABLE enrollment (
    student_ref INTEGER REFERENCES student(student_id),
    course_ref INTEGER REFERENCES course(course_id),
    grade REAL
);
CREATE TABLE dish (dish_id INTEGER PRIMARY KEY, dish_name TEXT, price REAL, notes TEXT);
INSERT INTO student VALUES (1, 'Nguyễn Văn An', 'Đà Nẵng', '2001-04-03'), (2, 'Marie Curie', 'Warsaw', '1999-11-07'),
                           (3, 'Ada Lovelace', 'London', '2000-12-10');
INSERT INTO course VALUES (10, 'Thermodynamics', 6), (11, 'Medieval Poetry', 3), (12, 'Linear Algebra', 5);
INSERT INTO enrollment VALUES (1, 10, 3.5), (2, 10, 4.0), (2, 12, 3.0), (3, 11, 2.5);
INSERT INTO dish VALUES (1, 'Trà sữa nướng', 3.5, 'a roasted milk tea served warm, popular in the north'),
                        (2, 'Phở bò', 5.0, 'beef noodle soup');
"""


def make_school_db(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(SCHOOL_SQL)
    conn.commit()
    conn.close()
    return path


@pytest.fixture()
def school_db(tmp_path: Path) -> Path:
    return make_school_db(tmp_path / "school.sqlite")


@pytest.fixture()
def school(school_db, tmp_path, settings):
    """A retriever over the school database's KB, built with ``settings`` (so on both stores)."""
    from reflect_sql.kb.build import build_kb
    from reflect_sql.kb.retrieve import Retriever

    build_kb(str(school_db), tmp_path / "kb", settings)
    retriever = Retriever(tmp_path / "kb", settings)
    yield retriever
    retriever.close()


@pytest.fixture(scope="session")
def pgvector_url(tmp_path_factory) -> str:
    """A throwaway PostgreSQL with pgvector (the PyPI package pgserver bundles both), stopped at the end."""
    import pgserver

    server = pgserver.get_server(tmp_path_factory.mktemp("pgvector"), cleanup_mode="delete")
    yield server.get_uri()
    server.cleanup()


@pytest.fixture(scope="session", params=["chroma", "pgvector"])
def settings(request) -> Settings:
    """Every KB test that builds with these settings runs on both vector stores."""
    # These tests pin the paper's k/m pruning, which the default budget would skip on schemas this
    # small (every one fits it); test_context_budget.py tests the budget itself.
    if request.param == "pgvector":
        return Settings(context_budget_tokens=0, kb_store="pgvector", kb_store_url=request.getfixturevalue("pgvector_url"))
    return Settings(context_budget_tokens=0)


@pytest.fixture(scope="session")
def superhero_kb(benchmarks_dir: Path, tmp_path_factory, settings) -> Path:
    from reflect_sql.kb.build import build_kb

    bird = benchmarks_dir / "bird"
    kb_dir = tmp_path_factory.mktemp("superhero-kb")
    build_kb(str(bird / "dev_databases" / "superhero" / "superhero.sqlite"), kb_dir, settings,
             descriptions=bird / "dev_databases" / "superhero" / "database_description",
             tables_json=bird / "dev_tables.json")
    return kb_dir


@pytest.fixture(scope="session")
def superhero(superhero_kb, settings):
    from reflect_sql.kb.retrieve import Retriever

    retriever = Retriever(superhero_kb, settings)
    yield retriever
    retriever.close()
