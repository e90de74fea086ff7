"""A question asked in another language: its English rendering is searched too and the hits merge,
and a glossary term it uses is searched with the term's meaning."""
from __future__ import annotations

import pytest

from reflect_sql.kb.build import build_kb
from reflect_sql.kb.retrieve import Retriever

VIETNAMESE = "Mỗi sinh viên đạt bao nhiêu điểm?"
ENGLISH = "What grade did each student get?"


def test_the_rendering_finds_what_the_question_alone_misses_and_the_hits_merge(school):
    alone = school.retrieve(VIETNAMESE, k=2, m=2)
    rendered = school.retrieve(ENGLISH, k=2, m=2)
    both = school.retrieve(VIETNAMESE, k=2, m=2, renderings=[ENGLISH])
    assert "enrollment.grade" not in alone.columns
    assert "enrollment.grade" in rendered.columns
    assert "enrollment.grade" in both.columns
    assert set(rendered.tables) <= set(both.tables)


def test_a_rendering_equal_to_the_question_changes_nothing(school):
    plain = school.retrieve(ENGLISH, k=2, m=2)
    again = school.retrieve(ENGLISH, k=2, m=2, renderings=[ENGLISH, " "])
    assert (plain.tables, plain.columns, plain.render()) == (again.tables, again.columns, again.render())


def test_a_glossary_term_is_searched_with_its_meaning(school_db, tmp_path, settings):
    glossary = tmp_path / "glossary.yaml"
    glossary.write_text("terms:\n  điểm: \"A student's grade in a course: enrollment.grade\"\n", encoding="utf-8")
    build_kb(str(school_db), tmp_path / "kb-terms", settings, glossary=glossary)
    retriever = Retriever(tmp_path / "kb-terms", settings)
    try:
        context = retriever.retrieve(VIETNAMESE, k=2, m=2)
    finally:
        retriever.close()
    assert "enrollment.grade" in context.columns
    assert "điểm" in context.terms


def test_glossary_words_with_accents_must_match_them():
    from reflect_sql.kb.retrieve import _mentions

    # "lâu" (long) and "lẩu" (hotpot) fold to the same letters; only the accents tell them apart.
    assert not _mentions("Bàn nào đang phải chờ lâu nhất?", "lẩu")
    assert _mentions("Món Lẩu Thái còn không?", "lẩu")
    assert _mentions("Bàn 5 đã chờ bao lâu?", "bàn")
    # A word written without accents matches the accented text, and English words their inflections not.
    assert _mentions("Giá một tô phở bò?", "pho")
    assert _mentions("How many orders are open NOW?", "now")
    assert not _mentions("How many orders are open nowadays?", "now")


def test_the_glossary_words_a_question_uses_with_their_meanings(school_db, tmp_path, settings):
    glossary = tmp_path / "glossary.yaml"
    glossary.write_text("terms:\n  điểm: \"A student's grade: enrollment.grade\"\n"
                        "aliases:\n  trà sữa nướng: Trà sữa nướng\n  nhiệt học: Thermodynamics\n", encoding="utf-8")
    build_kb(str(school_db), tmp_path / "kb-words", settings, glossary=glossary)
    retriever = Retriever(tmp_path / "kb-words", settings)
    try:
        found = retriever.glossary_in("Điểm môn nhiệt học của An là bao nhiêu?")
    finally:
        retriever.close()
    assert found == {"điểm": "A student's grade: enrollment.grade", "nhiệt học": "Thermodynamics"}


def test_whether_the_whole_database_fits_the_budget(school_db, tmp_path):
    from reflect_sql.settings import Settings

    build_kb(str(school_db), tmp_path / "kb-budget", Settings())
    for budget, whole in ((1536, True), (40, False), (0, False)):
        retriever = Retriever(tmp_path / "kb-budget", Settings(context_budget_tokens=budget))
        try:
            assert retriever.passes_whole_database() is whole, budget
            assert (retriever.retrieve("Which students take Thermodynamics?").pruned == "none") is whole
        finally:
            retriever.close()
