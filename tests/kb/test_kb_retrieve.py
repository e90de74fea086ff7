"""Two-step retrieval: FK bridges, key columns, widening, and the rendered schema context."""
from __future__ import annotations

import pytest

from reflect_sql.kb.build import build_kb
from reflect_sql.kb.retrieve import Retriever


def test_fk_expansion_brings_in_the_bridge_of_a_two_hop_join(school):
    question = "Which students take Thermodynamics?"
    context = school.retrieve(question, k=2)
    # The question names neither the enrollment table nor its columns; only the join needs it.
    assert set(context.tables) == {"student", "course", "enrollment"}
    enrollment = context.table("enrollment")
    assert enrollment.bridge and not context.table("student").bridge
    assert {"enrollment.student_ref", "enrollment.course_ref", "student.student_id", "course.course_id"} <= set(context.columns)
    assert {j.render() for j in context.joins} == {"enrollment.student_ref = student.student_id",
                                                   "enrollment.course_ref = course.course_id"}
    # k=1: one table, nothing to join.
    lone = school.retrieve(question, k=1)
    assert len(lone.tables) == 1 and lone.joins == []


def test_bridge_on_a_real_schema(superhero):
    context = superhero.retrieve("Please list all the superpowers of 3-D Man.")
    assert {"superhero", "superpower", "hero_power"} <= set(context.tables)
    assert context.table("hero_power").bridge
    assert "superpower.power_name" in context.columns and "superhero.superhero_name" in context.columns
    assert [(v.column, v.value) for v in context.values] == [("superhero_name", "3-D Man")]


def test_columns_are_bounded_by_m_and_widening_adds_context(superhero):
    question = "What is the average weight of the superheroes with blue eyes?"
    narrow = superhero.retrieve(question, k=1, m=1)
    table = narrow.entries[0]
    non_keys = [c for c in table.columns if "join" not in c.why and "key" not in c.why]
    assert len(non_keys) <= 1
    wide = superhero.retrieve(question, k=6, m=8)
    assert set(narrow.columns) < set(wide.columns)
    assert set(narrow.tables) <= set(wide.tables)
    with pytest.raises(ValueError):
        superhero.retrieve(question, k=0)


def test_render_is_create_table_like_with_meanings_and_samples(superhero):
    context = superhero.retrieve("Provide the full names of vampire heroes. vampire heroes refers to race = 'Vampire'")
    text = context.render()
    assert "CREATE TABLE superhero (" in text and "CREATE TABLE race (" in text
    assert "full_name TEXT, -- the full name of the superhero" in text
    assert "race_id INTEGER REFERENCES race(id)" in text
    assert "'Vampire'" in text  # the matched value is shown first among the samples
    assert "-- Join paths: superhero.race_id = race.id" in text
    data = context.to_json()
    assert set(data) >= {"tables", "columns", "values"}
    assert all("." in c for c in data["columns"])
    assert data["values"][0]["value"] == "Vampire"


@pytest.mark.postgres
def test_build_and_retrieve_on_postgresql(bird_pg, benchmarks_dir, tmp_path, settings):
    bird = benchmarks_dir / "bird"
    report = build_kb(bird_pg["superhero"], tmp_path / "kb", settings,
                      descriptions=bird / "dev_databases" / "superhero" / "database_description",
                      tables_json=bird / "dev_tables.json", db_id="superhero")
    assert report.tables == 10 and report.values_indexed > 1000
    retriever = Retriever(tmp_path / "kb", settings)
    context = retriever.retrieve("Please list all the superpowers of 3-D Man.")
    assert {"superhero", "superpower", "hero_power"} <= set(context.tables)
    assert context.dialect == "postgres" and context.values[0].value == "3-D Man"
    retriever.close()


def test_retrieval_weights_come_from_a_config_and_change_what_is_retrieved(superhero_kb, settings, tmp_path):
    from reflect_sql.settings import load_settings, parse_assignments

    question = "What is the average weight of the superheroes with blue eyes?"
    config = tmp_path / "exp.yaml"
    # A floor no score reaches: of each table only the key and join columns stay.
    config.write_text("settings:\n  context_budget_tokens: 0\n  retrieval_column_floor: 5.0\n")
    strict_settings = load_settings(config, environ={})
    assert strict_settings.retrieval_column_floor == 5.0
    default, strict = Retriever(superhero_kb, settings), Retriever(superhero_kb, strict_settings)
    try:
        shown = default.retrieve(question, k=1, m=8).entries[0]
        floored = strict.retrieve(question, k=1, m=8).entries[0]
        assert shown.name == floored.name
        assert any("join" not in c.why and "key" not in c.why for c in shown.columns)
        assert all("join" in c.why or "key" in c.why for c in floored.columns)
    finally:
        default.close()
        strict.close()

    # --set on the command line: a margin that admits every table of the top k, however weak.
    wide_settings = load_settings(overrides={"context_budget_tokens": 0,
                                             **parse_assignments(["retrieval_table_margin=100"])}, environ={})
    narrow_settings = load_settings(overrides={"context_budget_tokens": 0,
                                               **parse_assignments(["retrieval_table_margin=0",
                                                                    "retrieval_strong_value=1.5",
                                                                    "retrieval_strong_column_name=1.5",
                                                                    "retrieval_strong_table_name=1"])}, environ={})
    # A strength threshold of 0 admits every table of the top k too, with no evidence of its own.
    any_strong_settings = load_settings(overrides={"context_budget_tokens": 0,
                                                   **parse_assignments(["retrieval_table_margin=0",
                                                                        "retrieval_strong_value=0"])}, environ={})
    wide, narrow = Retriever(superhero_kb, wide_settings), Retriever(superhero_kb, narrow_settings)
    any_strong = Retriever(superhero_kb, any_strong_settings)
    try:
        many, few = wide.retrieve(question, k=6, m=4), narrow.retrieve(question, k=6, m=4)
        assert len(set(many.tables) - set(few.tables)) >= 2
        assert set(any_strong.retrieve(question, k=6, m=4).tables) == set(many.tables)
    finally:
        wide.close()
        narrow.close()
        any_strong.close()


def test_tables_whose_names_differ_only_in_case_keep_their_own_columns(pg_url, pg_reader, tmp_path, settings):
    """PostgreSQL may hold "Orders" and orders both: each selected table shows its own columns and
    its own evidence, not those of the first table its name matches case-insensitively."""
    import os

    import psycopg
    from psycopg import sql

    from reflect_sql.db.loader import schema_url

    schema = f"test_{os.getpid()}_case_twins"
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        admin.execute(sql.SQL('CREATE TABLE {}."Orders" (id int PRIMARY KEY, status text, placed_on date)').format(
            sql.Identifier(schema)))
        admin.execute(sql.SQL("CREATE TABLE {}.orders (id int PRIMARY KEY, status text, courier text)").format(
            sql.Identifier(schema)))
        admin.execute(sql.SQL("""INSERT INTO {}."Orders" VALUES (1, 'open', '2024-01-02')""").format(sql.Identifier(schema)))
        admin.execute(sql.SQL("INSERT INTO {}.orders VALUES (1, 'shipped', 'DHL'), (2, 'returned', 'UPS')").format(
            sql.Identifier(schema)))
    try:
        build_kb(pg_reader(schema_url(pg_url, schema)), tmp_path / "kb", settings)
        retriever = Retriever(tmp_path / "kb", settings.model_copy(update={"context_budget_tokens": 0}))
        try:
            context = retriever.retrieve("Which orders were shipped?", k=2, m=4)
        finally:
            retriever.close()
        by_name = {t.name: t for t in context.entries}
        assert set(by_name) == {"Orders", "orders"}
        assert {c.name for c in by_name["orders"].columns} <= {"id", "status", "courier"}
        assert {c.name for c in by_name["Orders"].columns} <= {"id", "status", "placed_on"}
        shipped = next(c for c in by_name["orders"].columns if c.name == "status")
        assert "value" in shipped.why  # 'shipped' is a value of orders.status, not of "Orders".status
    finally:
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
