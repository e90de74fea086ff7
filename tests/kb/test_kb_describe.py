"""The optional LLM describer: fills in missing descriptions once; the KB is its cache."""
from __future__ import annotations

from dspy.utils import DummyLM

from reflect_sql.kb.build import build_kb
from reflect_sql.kb.describe import DescriptionWriter, clean_description
from reflect_sql.kb.versions import KBDir
from reflect_sql.signatures.column_describer import ColumnDescriber


def test_signature_is_typed_with_a_rubric():
    assert set(ColumnDescriber.input_fields) == {"table", "column", "column_type", "sample_values", "sibling_columns"}
    assert set(ColumnDescriber.output_fields) == {"description"}
    assert "probably" in ColumnDescriber.__doc__ and "unit" in ColumnDescriber.__doc__


def test_describes_only_undescribed_columns_once(school_db, tmp_path, settings):
    descriptions = tmp_path / "d"
    descriptions.mkdir()
    (descriptions / "dish.csv").write_text(
        "original_column_name,column_name,column_description,data_format,value_description\n"
        "dish_id,,id of the dish,integer,\ndish_name,,name of the dish,text,\n"
        "price,,price in euros,real,\nnotes,,what the menu says,text,\n")
    answers = [{"description": f"Described column number {i}."} for i in range(10)]
    describer = DescriptionWriter(lm=DummyLM(answers))
    report = build_kb(str(school_db), tmp_path / "kb", settings, descriptions=descriptions, describer=describer)
    kb = KBDir(tmp_path / "kb").load()
    described = [(t.name, c.name) for t in kb.tables for c in t.columns if c.description_source == "llm"]
    # The three other tables' ten columns, in schema order; the CSV-described dish is left alone.
    assert report.described == describer.calls == len(described) == 10
    assert {t for t, _ in described} == {"student", "course", "enrollment"}
    assert kb.column("student", "student_id").description == "Described column number 0."
    assert kb.column("dish", "price").description == "price in euros"

    # Rebuilding, with or without a describer, keeps them and asks the LM nothing.
    silent = DescriptionWriter(lm=DummyLM([]))
    again = build_kb(str(school_db), tmp_path / "kb", settings, descriptions=descriptions, describer=silent)
    assert silent.calls == 0 and again.new_version is False
    build_kb(str(school_db), tmp_path / "kb", settings, descriptions=descriptions)
    assert KBDir(tmp_path / "kb").load().column("course", "title").description_source == "llm"


def test_the_prompt_carries_name_type_and_samples(school_db, tmp_path, settings):
    lm = DummyLM([{"description": "City where the student lives."}])
    describer = DescriptionWriter(lm=lm)
    build_kb(str(school_db), tmp_path / "kb", settings)
    kb = KBDir(tmp_path / "kb").load()
    table = kb.table("student")
    assert describer(table, table.column("home_city")) == "City where the student lives."
    prompt = " ".join(str(m.get("content")) for m in lm.history[-1]["messages"])
    assert "home_city" in prompt and "Warsaw" in prompt and "full_name" in prompt


def test_clean_description():
    assert clean_description('  "Home   city of the student."  ', "home_city") == "Home city of the student."
    assert clean_description("home city", "home_city") == ""
    assert clean_description(" ".join(["word"] * 60), "x").endswith("…")
