"""judge_form: checks: the semantic and entailment judges answer a True/False question per
criterion, placed on the paper's scales; the loops, thresholds and feedback work as with scores."""
import pytest

from paper_settings import Settings
from reflect_sql.lm.scripted import Probabilities
from reflect_sql.programs.judgment import RUBRICS, placed, problem

from test_loops import ALSO_GOOD, GOOD, steps

ALL_TRUE = {"columns_right": True, "granularity_right": True, "joins_right": True, "logic_right": True,
            "diagnosis": "none"}
ENTAILED = {"schema_right": True, "data_right": True, "diagnosis": "none"}


def test_checks_replace_the_scored_judges_and_their_answers_are_placed_on_the_scales(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": GOOD}, SemanticChecks=ALL_TRUE, EntailmentChecks=ENTAILED)
    pred, lm = run(script, Settings(judge_form="checks", judge_scores="stated"))
    calls = helpers.calls_by_signature(lm)
    assert calls["SemanticChecks"] == 1 and calls["EntailmentChecks"] == 1
    assert "SemanticJudge" not in calls and "EntailmentJudge" not in calls
    semantic = steps(pred, "synthesis.semantic")[0]
    assert semantic["scores"]["S"] == pytest.approx(10.0) and semantic["decision"] == "accept"
    assert semantic["scores"]["rationales"]["C"] == "columns right: True"
    assert pred.scores["entailment"] == pytest.approx(5.0) and pred.sql == GOOD


def test_a_false_check_rejects_with_its_criterion_and_diagnosis_in_the_feedback(run, helpers):
    wrong_join = {**ALL_TRUE, "joins_right": False, "diagnosis": "join stores on region_id"}
    script = helpers.Script(GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": GOOD}],
                            SemanticChecks=[wrong_join, ALL_TRUE], EntailmentChecks=ENTAILED)
    # J = 1, the rest 10: S = 0.1*10 + 0.3*10 + 0.4*1 + 0.2*10 = 6.4, below theta_s = 7.
    pred, lm = run(script, Settings(judge_form="checks", judge_scores="stated", theta_s=7, max_semantic_iterations=2))
    first, second = steps(pred, "synthesis.semantic")
    assert first["scores"]["J"] == 1.0 and first["scores"]["S"] == pytest.approx(6.4)
    assert first["decision"] == "regenerate with the diagnosis"
    assert "joins right: False" in first["feedback"] and "join stores on region_id" in first["feedback"]
    assert second["decision"] == "accept" and pred.sql == GOOD
    regenerated = helpers.inputs_of(lm, "GenerateSQL")[-1]["feedback"]
    assert "join stores on region_id" in regenerated


def test_expected_checks_are_the_probability_of_true_on_the_scale(run, helpers):
    unsure = {"schema_right": Probabilities({True: 0.6, False: 0.4}), "data_right": Probabilities({True: 0.5, False: 0.5}),
              "diagnosis": "none"}
    script = helpers.Script(GenerateSQL={"sql": GOOD}, SemanticChecks=ALL_TRUE, EntailmentChecks=unsure)
    pred, lm = run(script, Settings(judge_form="checks", judge_scores="expected", theta_e=3.5, max_entailment_iterations=1))
    step = steps(pred, "entailment")[0]
    # E_schema = 1 + 0.6*4 = 3.4, E_data = 1 + 0.5*4 = 3.0: E = 0.2*3.4 + 0.8*3.0 = 3.08 < 3.5.
    assert step["scores"]["E_schema"] == pytest.approx(3.4) and step["scores"]["E_data_judge"] == pytest.approx(3.0)
    assert step["scores"]["E"] == pytest.approx(3.08) and step["decision"] != "accept"
    asked = dict(zip([name for name, _ in lm.calls], lm.engine_impl.logprobs_asked))
    assert asked["EntailmentChecks"] == 10


def test_every_check_false_with_no_diagnosis_contradicts_itself_and_is_asked_again(run, helpers):
    contradiction = {k: False for k in ALL_TRUE if k != "diagnosis"} | {"diagnosis": "none"}
    script = helpers.Script(GenerateSQL={"sql": GOOD}, SemanticChecks=[contradiction, ALL_TRUE], EntailmentChecks=ENTAILED)
    pred, lm = run(script, Settings(judge_form="checks", judge_scores="stated"))
    step = steps(pred, "synthesis.semantic")[0]
    assert step["retry"].startswith("self-contradiction: every answer at the bottom")
    assert step["decision"] == "accept" and helpers.calls_by_signature(lm)["SemanticChecks"] == 2


def test_the_rubric_refuses_an_answer_that_is_not_true_or_false_and_places_sure_answers_at_the_ends():
    rubric = RUBRICS["EntailmentChecks"]

    class Reply:
        schema_right, data_right, diagnosis = "maybe", True, "none"

    assert problem(rubric, Reply()) == "schema_right='maybe' is not True or False"
    Reply.schema_right = False
    assert problem(rubric, Reply()) is None  # one false answer, one true: a judgment
    assert placed(rubric, {"schema_right": 0.0, "data_right": 1.0}) == {"e_schema": 1.0, "e_data": 5.0}
    assert placed(RUBRICS["SemanticChecks"], dict.fromkeys(RUBRICS["SemanticChecks"].checks.values(), 0.5)) == \
        dict.fromkeys(RUBRICS["SemanticChecks"].scores, 5.5)


def test_a_program_compiled_with_scored_judges_leaves_checks_judges_bare():
    """The shipped program's judge demos are scored replies: loading them into a checks judge would
    show it fields it does not have, and overwrite its instructions."""
    from reflect_sql.optimize.program_io import skeleton
    from reflect_sql.programs import shipped
    from reflect_sql.settings import Settings as Plain

    from pathlib import Path

    real = Path(shipped.__file__).resolve().parent / "compiled" / "qwen2.5-coder-1.5b.json"
    choice = shipped.resolve_program(str(real), "local/qwen2.5-coder-1.5b")
    scored = shipped.apply_program(skeleton(choice.mode), choice)
    scored_judge = dict(scored.named_predictors())["entailment_loop.judge"]
    assert scored_judge.demos  # the shipped program compiles the entailment judge

    checks = skeleton(choice.mode, Plain(judge_form="checks"))
    left = shipped.load_state(checks, choice.state, choice.mode, choice.path)
    predictors = dict(checks.named_predictors())
    assert sorted(left) == ["entailment_loop.judge", "synthesis_loop.judge"]
    assert predictors["entailment_loop.judge"].demos == []
    assert predictors["entailment_loop.judge"].signature.__name__ == "EntailmentChecks"
    assert "True or False" in predictors["entailment_loop.judge"].signature.instructions
    assert list(predictors["entailment_loop.judge"].signature.output_fields)[:2] == ["schema_right", "data_right"]
    # Every other role still gets its compiled state.
    assert predictors["synthesis_loop.generator"].demos == dict(scored.named_predictors())["synthesis_loop.generator"].demos
    assert predictors["synthesis_loop.generator"].demos
