"""reflect-sql judge-scale: every form of asking for scores judges the same labelled cases."""
from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest

from reflect_sql.cli import main
from reflect_sql.optimize.config import load_optimize_config
from reflect_sql.optimize.judge_scale import FORMS, form_signature, judge_case, summarize

ALL_FIELDS_RIGHT = {"verdict": True, "schema_rationale": "ok", "data_rationale": "ok", "column_rationale": "ok",
                    "granularity_rationale": "ok", "join_rationale": "ok", "logic_rationale": "ok"}


def test_each_form_asks_for_the_scores_its_own_way():
    rendered = {form: dspy.ChatAdapter().format_system_message(form_signature("semantic", form)[0]) for form in FORMS}
    assert "one of: 1; 2; 3; 4; 5; 6; 7; 8; 9; 10" in rendered["literal"]
    for form in ("int", "verdict_first", "flipped"):
        assert "an integer from 1 (wrong columns) to 10 (exactly the asked columns)" in rendered[form]
        assert "one of: 1; 2" not in rendered[form]
    assert "one of: wrong; mostly wrong; half right; mostly right; right" in rendered["words"]
    assert "then a score from 1 to 10:" in rendered["literal"] and "C, 1-10: 1 wrong columns" in rendered["literal"]
    assert list(form_signature("semantic", "verdict_first")[0].output_fields)[0] == "verdict"
    flipped = list(form_signature("semantic", "flipped")[0].output_fields)
    assert flipped.index("column_consistency") < flipped.index("column_rationale")
    shipped = list(form_signature("semantic", "int")[0].output_fields)
    assert shipped.index("column_consistency") > shipped.index("column_rationale")
    entailment = list(form_signature("entailment", "flipped")[0].output_fields)
    assert entailment == ["schema_rationale", "e_schema", "data_rationale", "e_data", "diagnosis"]
    # Every form keeps the judge's name (accounting and scripted replies go by it), but the checks
    # form, which is the shipped signature of judge_form: checks.
    for judge in ("semantic", "entailment"):
        for form in FORMS:
            sig, _ = form_signature(judge, form)
            kind = "Checks" if form == "checks" else "Judge"
            assert sig.__name__ == {"semantic": "Semantic", "entailment": "Entailment"}[judge] + kind


def _case(correct: bool):
    from reflect_sql.experiments.datasets import Question
    from reflect_sql.optimize.labelled import Case

    q = Question(question_id=1, index=0, db_id="menu", question="How many dishes?", evidence="",
                 gold_sql="SELECT COUNT(*) FROM dish", difficulty="simple", db_path="x.sqlite", descriptions_dir=None,
                 tables_json=None)
    return Case(q, "SELECT COUNT(*) FROM dish", correct, "gold" if correct else "dropped_filter", "", "CREATE TABLE dish (id)",
                "1 row", "all checks passed")


@pytest.mark.parametrize("reply, expected", [
    ({"e_schema": "mostly right", "e_data": "right"}, {"e_schema": 4.0, "e_data": 5.0}),
    ({"e_schema": "wrong", "e_data": "half right"}, {"e_schema": 1.0, "e_data": 3.0}),
])
def test_words_map_evenly_onto_the_scale(reply, expected):
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.settings import Settings

    lm = ScriptedLM({"EntailmentJudge": {**reply, "diagnosis": "none"}})
    judged = judge_case(_case(True), "entailment", "words", Settings(), lm)
    assert judged.values == expected


def test_off_scale_and_unparsable_replies_are_counted_as_unusable():
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.settings import Settings

    for reply in ({"e_schema": 9, "e_data": 5, "diagnosis": "none"}, "no fields at all"):
        judged = judge_case(_case(True), "entailment", "int", Settings(json_adapter_fallback=False), ScriptedLM([reply, reply]))
        assert judged.values is None and judged.score is None
    rows = [judge_case(_case(c), "entailment", "int", Settings(), ScriptedLM([r]))
            for c, r in ((True, {"e_schema": 5, "e_data": 5, "diagnosis": "none"}),
                         (False, {"e_schema": 1, "e_data": 1, "diagnosis": "none"}),
                         (False, {"e_schema": 9, "e_data": 1, "diagnosis": "none"}))]
    (row,) = summarize(rows, Settings())
    assert row["n"] == 3 and row["unusable"] == 1 and row["auc"] == 1.0
    assert row["all_bottom"] == round(1 / 3, 3) and row["agreement"] == round(2 / 3, 3)


def test_expected_scores_are_read_from_the_same_replies_and_ranked_apart():
    from reflect_sql.lm.scripted import Probabilities, ScriptedLM
    from reflect_sql.settings import Settings

    # Both replies write 5/4: stated scores tie, the digits' probabilities do not.
    sure = {"e_schema": Probabilities({5: 1.0}), "e_data": Probabilities({4: 0.9, 5: 0.1}), "diagnosis": "none"}
    unsure = {"e_schema": Probabilities({5: 0.6, 2: 0.4}), "e_data": Probabilities({4: 0.5, 1: 0.5}), "diagnosis": "none"}
    settings = Settings(judge_scores="expected")
    rows = [judge_case(_case(True), "entailment", "int", settings, ScriptedLM([sure])),
            judge_case(_case(False), "entailment", "int", settings, ScriptedLM([unsure]))]
    assert rows[0].score == rows[1].score
    assert rows[0].expected_values == {"e_schema": 5.0, "e_data": 4.1}
    assert rows[1].expected_values == {"e_schema": 3.8, "e_data": 2.5}
    stated, expected = summarize(rows, settings)
    assert (stated["scores"], stated["auc"]) == ("stated", 0.5)
    assert (expected["scores"], expected["auc"]) == ("expected", 1.0)
    # Without the setting no probabilities are asked for, and only the stated reading is reported.
    lm = ScriptedLM([sure])
    assert judge_case(_case(True), "entailment", "int", Settings(judge_scores="stated"), lm).expected_values is None
    assert lm.engine_impl.logprobs_asked == [None]


def test_the_command_judges_every_case_in_every_form_and_resumes(tiny_dataset, write_config, tmp_path):
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.optimize.judge_scale import run

    def reply(name, inputs):
        if name == "SemanticJudge":
            return {**ALL_FIELDS_RIGHT, "column_consistency": 9, "granularity": 8, "join_consistency": 9, "query_logic": 7,
                    "diagnosis": "none"}
        return {**ALL_FIELDS_RIGHT, "e_schema": 4, "e_data": 5, "diagnosis": "none"}

    write_config(tmp_path / "exp.yaml", tiny_dataset, limit=3)
    (tmp_path / "opt.yaml").write_text("experiment: exp.yaml\ncompile:\n  train: {exclude_eval: true, limit: 3}\n")
    oc = load_optimize_config(tmp_path / "opt.yaml")
    lm = ScriptedLM(reply)
    forms = ["literal", "int", "verdict_first", "flipped"]
    summary = run(oc, tmp_path / "js", forms, ["semantic", "entailment"], lms=(lm, lm))
    rows = [json.loads(line) for line in (tmp_path / "js" / "rows.jsonl").read_text().splitlines()]
    cases = {(r["key"], r["kind"]) for r in rows}
    assert len(rows) == len(cases) * len(forms) * 2 and len(lm.calls) == len(rows)
    assert {(r["judge"], r["form"]) for r in summary} == {(j, f) for j in ("semantic", "entailment") for f in forms}
    table = (tmp_path / "js" / "judge_scale.md").read_text()
    assert "| semantic | literal |" in table and "theta_s=" in table
    calls = len(lm.calls)
    run(oc, tmp_path / "js", forms, ["semantic", "entailment"], lms=(lm, lm))
    assert len(lm.calls) == calls  # resumed: nothing judged twice


def test_unknown_form_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["judge-scale", str(tmp_path / "missing.yaml"), "--out", str(tmp_path / "o"), "--forms", "int,bogus"]) == 2
    err = capsys.readouterr().err
    assert "bogus" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag, expected", [(["--program", "none"], None), ([], None),
                                             (["--program", "p.json"], "p.json")])
def test_program_none_means_the_bare_signatures_as_in_eval(flag, expected, tmp_path, monkeypatch):
    import reflect_sql.optimize.judge_scale as judge_scale

    asked = {}

    def fake_run(oc, out, forms, judges, log=None, program=None):
        asked["program"] = program
        return []

    monkeypatch.setattr(judge_scale, "run", fake_run)
    monkeypatch.setattr("reflect_sql.optimize.config.load_optimize_config", lambda path, sets: None)
    assert main(["judge-scale", str(tmp_path / "opt.yaml"), "--out", str(tmp_path / "o"), *flag]) == 0
    assert asked["program"] == (None if expected is None else Path(expected))


def _program_with_judge_demos(path, train_questions):
    from reflect_sql.optimize.program_io import predictor_for, save_program, skeleton

    program = skeleton("reflect")
    predictor_for(program, "entailment_judge").demos = [
        {"question": "DEMO QUESTION zebra", "evidence": "", "schema_context": "CREATE TABLE zebra (id)", "sql": "SELECT 1",
         "result_preview": "1", "check_findings": "", "e_schema": 2, "e_data": 3, "diagnosis": "DEMO DIAGNOSIS"}]
    save_program(program, path, {"lm": "local/qwen2.5-coder-1.5b", "train": {"questions": train_questions}})
    return path


def test_a_compiled_program_shows_its_judge_demos_in_the_int_form_only(tiny_dataset, write_config, tmp_path):
    from reflect_sql.errors import UserError
    from reflect_sql.lm.scripted import ScriptedLM
    from reflect_sql.optimize.judge_scale import run

    write_config(tmp_path / "exp.yaml", tiny_dataset, limit=3)
    (tmp_path / "opt.yaml").write_text("experiment: exp.yaml\ncompile:\n  train: {exclude_eval: true, limit: 3}\n")
    oc = load_optimize_config(tmp_path / "opt.yaml")
    prompts = []

    def reply(name, inputs):
        return {"e_schema": 4, "e_data": 5, "diagnosis": "none"}

    lm = ScriptedLM(reply)
    original = lm.engine_impl.complete

    def remember(request):
        prompts.append(" ".join(m.text or "" for m in request.messages))
        return original(request)

    lm.engine_impl.complete = remember
    program = _program_with_judge_demos(tmp_path / "p.json", ["not-a-judged-question"])
    run(oc, tmp_path / "js", ["int", "literal"], ["entailment"], lms=(lm, lm), program=program)
    rows = [json.loads(line) for line in (tmp_path / "js" / "rows.jsonl").read_text().splitlines()]
    shown = ["DEMO DIAGNOSIS" in p for p in prompts]
    assert len(prompts) == len(rows) and sum(shown) == len(rows) // 2  # the int form's calls, not the literal's
    assert "with the demos of" in (tmp_path / "js" / "judge_scale.md").read_text()

    # The rows of one out dir come from one program.
    with pytest.raises(UserError, match="use another --out"):
        run(oc, tmp_path / "js", ["int"], ["entailment"], lms=(lm, lm))
    # A judge compiled on a judged question is not measured on it.
    judged = sorted({r["key"] for r in rows})
    seen = _program_with_judge_demos(tmp_path / "seen.json", judged[:1])
    with pytest.raises(UserError, match="was compiled on 1 of the questions judged here"):
        run(oc, tmp_path / "js2", ["int"], ["entailment"], lms=(lm, lm), program=seen)


def test_yes_no_forms_ask_true_or_false_and_place_the_answer_on_the_scale():
    from reflect_sql.lm.scripted import Probabilities, ScriptedLM
    from reflect_sql.settings import Settings

    checks, _ = form_signature("semantic", "checks")
    assert list(checks.output_fields) == ["columns_right", "granularity_right", "joins_right", "logic_right", "diagnosis"]
    assert all(checks.output_fields[f].annotation is bool for f in list(checks.output_fields)[:4])
    verdict, _ = form_signature("entailment", "verdict")
    assert list(verdict.output_fields) == ["answers_question", "diagnosis"]
    from reflect_sql.signatures.entailment_judge import EntailmentJudge
    assert list(verdict.input_fields) == list(EntailmentJudge.input_fields)

    settings = Settings(judge_scores="expected")
    reply = {"columns_right": Probabilities({True: 0.8, False: 0.2}), "granularity_right": Probabilities({True: 1.0}),
             "joins_right": Probabilities({False: 0.7, True: 0.3}), "logic_right": Probabilities({True: 0.5, False: 0.5}),
             "diagnosis": "the join key is wrong"}
    judged = judge_case(_case(False), "semantic", "checks", settings, ScriptedLM({"SemanticChecks": reply}))
    assert judged.values == {"column_consistency": 10.0, "granularity": 10.0, "join_consistency": 1.0,
                             "query_logic": 10.0}
    assert judged.expected_values == {"column_consistency": 8.2, "granularity": 10.0, "join_consistency": 3.7,
                                      "query_logic": 5.5}

    # One verdict stands for every score; a sure False is the bottom of the scale and counts as such.
    sure_no = {"answers_question": Probabilities({False: 0.9, True: 0.1}), "diagnosis": "wrong filter"}
    judged = judge_case(_case(False), "entailment", "verdict", settings, ScriptedLM([sure_no]))
    assert judged.values == {"e_schema": 1.0, "e_data": 1.0} and judged.all_bottom
    assert judged.expected_values == {"e_schema": 1.4, "e_data": 1.4}
    unsure_yes = {"answers_question": Probabilities({True: 0.6, False: 0.4}), "diagnosis": "none"}
    rows = [judged, judge_case(_case(True), "entailment", "verdict", settings, ScriptedLM([unsure_yes]))]
    stated, expected = summarize(rows, settings)
    assert (stated["auc"], expected["auc"]) == (1.0, 1.0)
    assert expected["mean_right"] == 3.4


def test_the_best_threshold_is_between_two_scores_and_maximises_agreement():
    from reflect_sql.optimize.judge_scale import best_threshold

    # Right ones at 8.6 and 8.5, wrong ones at 8.4 and 8.55: accepting from 8.45 or from 8.575 gets
    # 3 of 4; the lower one is kept.
    parsed = [(8.6, True), (8.5, True), (8.4, False), (8.55, False)]
    assert best_threshold(parsed, 4) == {"best_threshold": 8.45, "agreement_at_best": 0.75}
    # An unusable reply counts against agreement: n is every case, not only the parsed ones.
    assert best_threshold(parsed, 5)["agreement_at_best"] == 0.6
    assert best_threshold([(3.0, True), (3.0, False)], 2) == {"best_threshold": None, "agreement_at_best": None}
    # Mostly wrong cases: the best cut (from 2.5: 5 of 7) is no better than rejecting all 7 (5 of 7),
    # so there is no threshold to report.
    mostly_wrong = [(3.0, True), (2.0, False), (3.0, False), (1.0, False), (1.0, True), (2.0, False), (1.0, False)]
    assert best_threshold(mostly_wrong, 7) == {"best_threshold": None, "agreement_at_best": None}
    # One more right case at the top: accepting from 2.5 (or 3.5) gets 6 of 8, rejecting all 5 of 8.
    assert best_threshold([*mostly_wrong, (4.0, True)], 8) == {"best_threshold": 2.5, "agreement_at_best": 0.75}
