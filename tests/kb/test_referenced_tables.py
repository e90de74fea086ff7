"""Tables the question or its evidence references explicitly are kept beyond k (``keep_referenced_tables``)."""
from __future__ import annotations

from reflect_sql.kb.retrieve import Retriever


def test_a_qualified_reference_in_the_evidence_keeps_its_table_beyond_k(superhero):
    question = "List the powers of 3-D Man."
    evidence = "3-D Man refers to superhero_name = '3-D Man'; powers refers to superpower.power_name"
    # The question names the hero; with k = 1 the power table does not make the cut by score alone.
    assert superhero.retrieve(question, k=1).tables == ["superhero"]
    context = superhero.retrieve(question, k=1, evidence=evidence)
    assert {"superhero", "superpower"} <= set(context.tables)
    assert context.table("hero_power").bridge  # the join between them still comes with them
    assert "superpower.power_name" in context.columns


def test_what_counts_as_an_explicit_reference(superhero):
    found = superhero.referenced_tables
    assert found("superpower.power_name") == {"superpower"}
    assert found('"superpower"."power_name" and `colour`.`colour`') == {"superpower", "colour"}
    # A column identifier only one table has (an underscore: not an English word) names that table.
    assert found("where power_name = 'Flight'") == {"superpower"}
    assert found("group by hero_power") == {"hero_power"}  # a table name that is an identifier
    # Not references: an alias, a column of another table, a column several tables share, plain words.
    assert found("T1.colour") == set()
    assert found("superhero.hero_id") == set()
    assert found("hero_id") == set()  # hero_power and hero_attribute both have it
    assert found("the colour of the superhero, and its publisher") == set()
    assert found("version 1.5 of race.x") == set()
    # Nor do quoted values, e-mail addresses and dotted chains, though their parts are schema names.
    assert found("where power_name = 'superpower.power_name'") == {"superpower"}  # by the column outside the quotes
    assert found("mail 'colour.colour@x.org' or colour.colour@x.org, see colour.colour.txt") == set()
    assert found("Women's superpower.power_name isn't quoted") == {"superpower"}


def test_the_setting_turns_it_off(superhero_kb, settings):
    question = "List the powers of 3-D Man."
    evidence = "3-D Man refers to superhero_name = '3-D Man'; powers refers to superpower.power_name"
    off = Retriever(superhero_kb, settings.model_copy(update={"keep_referenced_tables": False}))
    on = Retriever(superhero_kb, settings)
    try:
        kept = set(on.retrieve(question, k=1, evidence=evidence).tables)
        plain = set(off.retrieve(question, k=1, evidence=evidence).tables)
        assert plain == {"superhero"} and kept == {"superhero", "superpower", "hero_power"}
    finally:
        on.close()
        off.close()
