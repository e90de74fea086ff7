"""The paper's Table 4 case on a small table: a ratio computed with integer division over rows where
the denominator is zero. The deterministic checks and the entailment judge must push the SQL to
CAST(... AS REAL) with a > 0 filter on the denominator."""
import pytest

from paper_settings import Settings

QUESTION = "What is the return rate (returns per order) of each store?"
NAIVE = "SELECT name, returns / orders AS return_rate FROM stores"
FIXED = "SELECT name, CAST(returns AS REAL) / orders AS return_rate FROM stores WHERE orders > 0"


def generator(inputs):
    """Writes the naive SQL until the feedback carries both check findings, then the fixed one."""
    feedback = inputs.get("feedback", "")
    if "integer_division" in feedback and "division_by_zero" in feedback:
        return {"sql": FIXED}
    return {"sql": NAIVE}


def test_integer_division_and_zero_denominator_are_fixed(run, helpers, retriever):
    script = helpers.Script(
        GenerateSQL=generator,
        # A lenient judge: it would accept the naive result on its own.
        EntailmentJudge=[helpers.entailment(5, 4, diagnosis="looks plausible"), helpers.entailment(5, 5)],
    )
    pred, lm = run(script, Settings(), question=QUESTION)

    first, second = [s for s in pred.trace if s["loop"] == "entailment"]
    assert first["inputs"]["sql"] == NAIVE
    assert {c["check"] for c in first["inputs"]["checks"]} == {"integer_division", "division_by_zero"}
    assert all(c["severity"] == "error" for c in first["inputs"]["checks"])
    # The checks override the lenient judge: E_data drops to 1, so E = 0.2*5 + 0.8*1 < theta_e.
    assert first["scores"]["E_data_judge"] == 4 and first["scores"]["E"] == pytest.approx(1.8)
    assert first["decision"] == "back to retrieval with the diagnosis"

    # The judge saw the findings, and the findings travelled back through loop 1 to the generator.
    judge_inputs = helpers.inputs_of(lm, "EntailmentJudge")
    assert "integer_division" in judge_inputs[0]["check_findings"] and "division_by_zero" in judge_inputs[0]["check_findings"]
    assert "integer_division" in helpers.inputs_of(lm, "RetrievalJudge")[1]["diagnosis"]
    feedback = helpers.inputs_of(lm, "GenerateSQL")[1]["feedback"]
    assert "integer_division" in feedback and "division_by_zero" in feedback and NAIVE in feedback

    assert second["inputs"]["checks"] == [] and second["decision"] == "accept"
    assert pred.sql == FIXED
    assert "CAST(returns AS REAL)" in pred.sql and "orders > 0" in pred.sql
    assert [tuple(r) for r in pred.rows] == [("North", 0.3), ("East", 0.25)]
    assert pred.scores["entailment"] == pytest.approx(5.0)
    assert len(retriever.enriched) == 1 and retriever.enriched[0]["sql"] == FIXED


def test_the_naive_ratio_is_never_accepted_nor_learnt(run, helpers, retriever):
    """A generator that never learns: each of its ratios fails the checks and the KB is never touched."""
    attempts = iter([NAIVE, "SELECT name, returns / orders AS r FROM stores", "SELECT name, 1 / orders AS r FROM stores"])
    script = helpers.Script(GenerateSQL=lambda inputs: {"sql": next(attempts)}, EntailmentJudge=helpers.entailment(5, 5))
    pred, lm = run(script, Settings(max_entailment_iterations=3), question=QUESTION)
    assert helpers.calls_by_signature(lm)["EntailmentJudge"] == 3
    assert all(s["scores"]["E"] < 3 for s in pred.trace if s["loop"] == "entailment")
    assert pred.scores["entailment"] == pytest.approx(1.8) and pred.sql != FIXED
    assert not retriever.enriched
