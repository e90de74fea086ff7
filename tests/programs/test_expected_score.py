"""Probability-weighted judge scores: read from the reply's tokens, and used by the loops when asked."""
import math

import pytest

from paper_settings import Settings
from reflect_sql.lm.scripted import Probabilities
from reflect_sql.programs.expected_score import expected_scores
from reflect_sql.signatures.scales import SCALE_5, SCALE_10

from test_loops import GOOD, steps


def tok(text, alternatives=None):
    """One token as DSPy hands it over; ``alternatives`` maps token text -> probability."""
    top = [{"token": t, "logprob": math.log(p)} for t, p in (alternatives or {}).items()]
    chosen = (alternatives or {}).get(text, 1.0)
    return {"token": text, "logprob": math.log(chosen), "top_logprobs": top}


def test_expectation_over_the_digits_written_for_each_field():
    tokens = [tok("[[ ## e_schema ## ]]\n"), tok("5", {"5": 0.9, "4": 0.1}), tok("\n\n[[ ## e_data ## ]]\n"),
              tok("4", {"4": 0.5, "2": 0.3, "The": 0.2}), tok("\n\n[[ ## completed ## ]]")]
    values = expected_scores({"content": tokens}, {"e_schema": SCALE_5, "e_data": SCALE_5})
    assert values["e_schema"] == pytest.approx(4.9)
    # Non-digit alternatives are not part of the scale: the digits' mass is renormalised.
    assert values["e_data"] == pytest.approx((0.5 * 4 + 0.3 * 2) / 0.8, abs=1e-3)


def test_a_leading_space_and_the_json_adapter_reply_are_read_too():
    tokens = [tok('{"e_schema":'), tok(" 3", {" 3": 0.5, " 5": 0.5}), tok(', "e_data": '), tok("2", {"2": 1.0}), tok("}")]
    assert expected_scores({"content": tokens}, {"e_schema": SCALE_5, "e_data": SCALE_5}) == {"e_schema": 4.0, "e_data": 2.0}


def test_on_a_ten_point_scale_a_written_one_is_split_by_the_next_digit():
    # "10" is written as "1" then "0": P(0 next) = 0.75 says how much of the "1" was 10.
    tokens = [tok("[[ ## relevance ## ]]\n"), tok("1", {"1": 0.8, "9": 0.2}), tok("0", {"0": 0.75, "\n": 0.25}),
              tok("\n\n[[ ## completeness ## ]]\n"), tok("9", {"9": 0.6, "1": 0.4}), tok("\n")]
    values = expected_scores({"content": tokens}, {"relevance": SCALE_10, "completeness": SCALE_10})
    assert values["relevance"] == pytest.approx(0.8 * (0.75 * 10 + 0.25 * 1) + 0.2 * 9, abs=1e-3)
    # A "1" beside a written 9 is read as the start of 10 (its continuation was never seen).
    assert values["completeness"] == pytest.approx(0.6 * 9 + 0.4 * 10, abs=1e-3)


def test_a_low_written_score_reads_an_unseen_one_as_one():
    tokens = [tok("[[ ## relevance ## ]]\n"), tok("2", {"2": 0.5, "1": 0.5}), tok("\n[[ ## completeness ## ]]\n"),
              tok("3", {"3": 1.0})]
    values = expected_scores({"content": tokens}, {"relevance": SCALE_10, "completeness": SCALE_10})
    assert values == {"relevance": 1.5, "completeness": 3.0}


def test_a_field_the_tokens_do_not_locate_gives_no_expectation():
    tokens = [tok("[[ ## e_schema ## ]]\n"), tok("5", {"5": 1.0}), tok("\n[[ ## e_data ## ]]\nfive")]
    assert expected_scores({"content": tokens}, {"e_schema": SCALE_5, "e_data": SCALE_5}) is None
    assert expected_scores(None, {"e_schema": SCALE_5}) is None


def test_expected_scores_decide_the_entailment_loop(run, helpers):
    # Written: e_data 4 (accept at theta_e 3); the probabilities say 4 or 1 equally: E = 0.2*5 + 0.8*2.5 = 3.0.
    judge = {"e_schema": Probabilities({5: 1.0}), "e_data": Probabilities({4: 0.5, 1: 0.5}), "diagnosis": "none"}
    script = helpers.Script(GenerateSQL={"sql": GOOD}, EntailmentJudge=judge)
    pred, lm = run(script, Settings(judge_scores="expected", theta_e=3.1, max_entailment_iterations=1))
    step = steps(pred, "entailment")[0]
    assert step["scores"]["E_schema"] == pytest.approx(5.0) and step["scores"]["E_data_judge"] == pytest.approx(2.5)
    assert step["scores"]["E"] == pytest.approx(3.0)
    assert step["decision"] != "accept"
    asked = dict(zip([name for name, _ in lm.calls], lm.engine_impl.logprobs_asked))
    assert asked["EntailmentJudge"] == 10 and asked["GenerateSQL"] is None

    stated, lm = run(helpers.Script(GenerateSQL={"sql": GOOD}, EntailmentJudge=judge),
                     Settings(judge_scores="stated", theta_e=3.1, max_entailment_iterations=1))
    assert steps(stated, "entailment")[0]["scores"]["E"] == pytest.approx(0.2 * 5 + 0.8 * 4)
    assert set(lm.engine_impl.logprobs_asked) == {None}


def test_a_judge_lm_without_log_probabilities_is_read_as_stated(run, helpers, monkeypatch):
    from reflect_sql.lm.scripted import ScriptedEngine

    # An engine like Anthropic's: DSPy knows it cannot return log-probabilities, and it would refuse them.
    monkeypatch.setattr(ScriptedEngine, "supported_params", frozenset({"temperature", "max_tokens", "stop", "response_format"}))
    judge = {"e_schema": Probabilities({5: 1.0}), "e_data": Probabilities({4: 0.5, 1: 0.5}), "diagnosis": "none"}
    pred, lm = run(helpers.Script(GenerateSQL={"sql": GOOD}, EntailmentJudge=judge),
                   Settings(judge_scores="expected", max_entailment_iterations=1))
    step = steps(pred, "entailment")[0]
    assert step["failure"] is None and step["scores"]["E"] == pytest.approx(0.2 * 5 + 0.8 * 4)
    assert set(lm.engine_impl.logprobs_asked) == {None}
