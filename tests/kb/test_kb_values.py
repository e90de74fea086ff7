"""The value index: literals in a question find the column holding them, despite case, accents and typos."""
from __future__ import annotations

from reflect_sql.kb.text import fold, stem
from reflect_sql.kb.values import ValueIndex, indexable_column, indexable_value


def _index(tmp_path, rows):
    index = ValueIndex(tmp_path / "values.sqlite")
    index.replace_values(rows)
    return index


def test_folding():
    assert fold("Trà sữa NƯỚNG!") == "tra sua nuong"
    assert fold("Đà Nẵng") == "da nang"
    assert [stem(w) for w in ("heroes", "cities", "hiring", "hire", "singers")] == ["hero", "city", "hire", "hire", "singer"]


def test_exact_accent_and_case_insensitive(tmp_path):
    index = _index(tmp_path, [("dish", "dish_name", "Trà sữa nướng"), ("dish", "dish_name", "Phở bò"),
                              ("student", "home_city", "Đà Nẵng")])
    hits = index.lookup("How much is a TRA SUA NUONG in da nang?")
    found = {(h.table, h.column, h.value) for h in hits}
    assert ("dish", "dish_name", "Trà sữa nướng") in found
    assert ("student", "home_city", "Đà Nẵng") in found
    assert all(h.score == 1.0 for h in hits)
    index.close()


def test_typo_finds_the_column(superhero):
    hits = superhero.values.lookup("What is the eye colour of Magnito?")
    best = hits[0]
    assert (best.table, best.column, best.value) == ("superhero", "superhero_name", "Magneto")
    assert 0.7 < best.score < 1.0  # found by similarity, ranked below an exact hit
    # Through retrieval, the column and its value reach the context.
    context = superhero.retrieve("What is the eye colour of Magnito?")
    assert "superhero.superhero_name" in context.columns
    assert "'Magneto'" in context.render()


def test_no_match_for_unrelated_words(tmp_path):
    index = _index(tmp_path, [("dish", "dish_name", "Magneto"), ("dish", "dish_name", "Phở bò")])
    assert index.lookup("How many students are enrolled in the course?") == []
    index.close()


def test_aliases_report_the_value_they_stand_for(tmp_path):
    index = _index(tmp_path, [("dish", "dish_name", "Trà sữa nướng")])
    index.replace_aliases([("dish", "dish_name", "Trà sữa nướng", "roasted milk tea")])
    hit = index.lookup("price of the roasted milk tea")[0]
    assert (hit.value, hit.alias, hit.score) == ("Trà sữa nướng", "roasted milk tea", 1.0)
    index.close()


def test_replace_is_a_no_op_when_unchanged(tmp_path):
    index = _index(tmp_path, [("t", "c", "Alpha")])
    assert index.replace_values([("t", "c", "Alpha")]) is False
    assert index.replace_values([("t", "c", "Beta")]) is True
    assert [h.value for h in index.lookup("beta")] == ["Beta"]
    index.close()


def test_what_is_not_indexed():
    assert not indexable_column("member_id", "TEXT", ["rec1"])
    assert not indexable_column("birth_date", "TEXT", ["2001-04-03", "1999-11-07"])
    assert not indexable_column("created", "DATE", [])
    assert not indexable_column("price", "REAL", [3.5])
    assert not indexable_column("code", "", [1, 2])  # SQLite's loose types: numbers all the same
    assert indexable_column("full_name", "TEXT", ["Ada Lovelace"])
    assert indexable_column("Name", "varchar(50)", ["x"])
    assert not indexable_value("x" * 200)  # free text
    assert not indexable_value("12345")
    assert indexable_value("Apt 4B")
