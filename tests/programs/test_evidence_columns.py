"""The evidence check (programs/evidence_columns.py) on the real BIRD superhero schema, and in the
synthesis loop on a scripted LM: SQL that ignores an evidence clause goes back to the generator
without a semantic judge call."""
import json

import pytest

from paper_settings import Settings
from reflect_sql.db import open_engine
from reflect_sql.programs.evidence_columns import evidence_clauses, feedback, unused_clauses

EVIDENCE = "3-D Man refers to superhero_name = '3-D Man'; superpowers refers to power_name"
POWERS = ("SELECT T3.power_name FROM superhero AS T1 JOIN hero_power AS T2 ON T1.id = T2.hero_id "
          "JOIN superpower AS T3 ON T2.power_id = T3.id WHERE T1.superhero_name = '3-D Man'")
BY_ID = ("SELECT T3.id FROM superhero AS T1 JOIN hero_power AS T2 ON T1.id = T2.hero_id "
         "JOIN superpower AS T3 ON T2.power_id = T3.id WHERE T1.superhero_name = '3-D Man'")


@pytest.fixture(scope="module")
def superhero(benchmarks_dir):
    with open_engine(str(benchmarks_dir / "bird" / "dev_databases" / "superhero" / "superhero.sqlite")) as engine:
        yield engine.introspect()


def test_clauses_name_the_schema_columns_and_skip_values_and_prose(superhero):
    clauses = evidence_clauses(EVIDENCE + "; 'President' is a position; heroes refers to the people in the films",
                               superhero)
    assert clauses == [("3-D Man refers to superhero_name = '3-D Man'", ("superhero_name",)),
                       ("superpowers refers to power_name", ("power_name",))]
    # A value in quotes is not a name, even when it spells one; a table-qualified name counts as its column.
    assert evidence_clauses("strong refers to \"power_name\"", superhero) == []
    assert evidence_clauses("weight refers to superhero.weight_kg", superhero)[0][1] == ("weight_kg",)
    # A qualified name whose table lacks the column is not that column.
    assert evidence_clauses("x refers to colour.weight_kg", superhero) == []


def test_sql_that_ignores_a_clause_is_found_and_one_that_uses_every_clause_is_not(superhero):
    assert unused_clauses(POWERS, EVIDENCE, superhero, "sqlite") == []
    unused = unused_clauses(BY_ID, EVIDENCE, superhero, "sqlite")
    assert [u.clause for u in unused] == ["superpowers refers to power_name"]
    assert unused[0].columns == ("power_name",)
    text = feedback(BY_ID, unused)
    assert BY_ID in text and '"superpowers refers to power_name" names power_name' in text
    # No evidence, or SQL that does not parse: nothing to say (the compile step owns the latter).
    assert unused_clauses(BY_ID, "", superhero, "sqlite") == []
    assert unused_clauses("SELECT FROM WHERE (", EVIDENCE, superhero, "sqlite") == []


RATE_EVIDENCE = "return rate refers to returns / orders"
IGNORES = "SELECT name FROM stores ORDER BY id"
GOOD = "SELECT name, CAST(returns AS REAL) / orders AS return_rate FROM stores WHERE orders > 0"


def _steps(pred, loop):
    return [s for s in pred.trace if s["loop"] == loop]


def test_sql_ignoring_the_evidence_is_regenerated_without_a_judge_call(run, helpers):
    script = helpers.Script(GenerateSQL=[{"sql": IGNORES}, {"sql": GOOD}])
    pred, lm = run(script, Settings(check_evidence_columns=True), evidence=RATE_EVIDENCE)
    generations = helpers.inputs_of(lm, "GenerateSQL")
    assert len(generations) == 2
    assert "return rate refers to returns / orders" in generations[1]["feedback"] and IGNORES in generations[1]["feedback"]
    judged = [inputs["sql"] for inputs in helpers.inputs_of(lm, "SemanticJudge")]
    assert judged == [GOOD]  # the ignoring SQL cost no judge call
    [step] = _steps(pred, "synthesis.evidence")
    assert step["scores"] == {"unused_clauses": 1} and step["decision"].startswith("regenerate")
    assert pred.sql == GOOD


def test_the_check_is_off_by_default_and_its_setting_turns_it_on(run, helpers):
    script = helpers.Script(GenerateSQL=[{"sql": IGNORES}, {"sql": GOOD}])
    pred, lm = run(script, Settings(), evidence=RATE_EVIDENCE)
    assert not _steps(pred, "synthesis.evidence")
    assert pred.sql == IGNORES and len(helpers.inputs_of(lm, "GenerateSQL")) == 1


def test_on_the_last_generation_the_judge_decides_and_the_sql_that_uses_the_evidence_ranks_first(run, helpers):
    # Both generations: the first ignores the evidence, the last uses it but the judge rejects both.
    settings = Settings(check_evidence_columns=True, max_semantic_iterations=2, max_entailment_iterations=1)
    script = helpers.Script(GenerateSQL=[{"sql": GOOD}, {"sql": IGNORES}],
                            SemanticJudge=[helpers.semantic(2, diagnosis="wrong"), helpers.semantic(3, diagnosis="wrong")])
    pred, lm = run(script, settings, evidence=RATE_EVIDENCE)
    # GOOD uses the evidence: judged (rejected, S 2); IGNORES is the last generation, so the judge sees
    # it too (S 3), and the check's trace step says the judge decided.
    assert [i["sql"] for i in helpers.inputs_of(lm, "SemanticJudge")] == [GOOD, IGNORES]
    [step] = _steps(pred, "synthesis.evidence")
    assert step["decision"] == "last generation: the judge decides"
    # The higher S does not outrank ignoring the evidence.
    assert pred.sql == GOOD


def test_the_report_counts_false_alarms_on_gold(tmp_path, capsys):
    from reflect_sql.experiments.evidence_report import main

    db_dir = tmp_path / "dev_databases" / "shop"
    db_dir.mkdir(parents=True)
    import sqlite3

    with sqlite3.connect(db_dir / "shop.sqlite") as conn:
        conn.executescript("CREATE TABLE stores (id INTEGER PRIMARY KEY, name TEXT, orders INTEGER, returns INTEGER);")
    conn.close()
    (tmp_path / "dev.json").write_text(json.dumps([
        {"question_id": 1, "db_id": "shop", "question": "q", "evidence": RATE_EVIDENCE, "SQL": GOOD, "difficulty": "simple"},
        {"question_id": 2, "db_id": "shop", "question": "q", "evidence": RATE_EVIDENCE, "SQL": IGNORES, "difficulty": "simple"},
        {"question_id": 3, "db_id": "shop", "question": "q", "evidence": "", "SQL": IGNORES, "difficulty": "simple"},
    ]))
    assert main(["--gold", f"bird:{tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert f"| gold, bird {tmp_path} | 2 | 2 | 1 | 1 (50.0%) |" in out
    assert '- 2: "return rate refers to returns / orders" names returns, orders' in out
    assert main(["--gold", "nonsense"]) == 2
