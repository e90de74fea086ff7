"""Calling one predictor: on its role's LM, labelled for accounting, with its cost measured, and
with bad LM output turned into a recorded failure instead of an exception.

A judge's reply is also checked as a judgment (``programs/judgment.py``): one that contradicts
itself or leaves its scale is retried once through the other adapter, and is a failure of kind
"judgment" when the retry is no better. The retry's cost is in the call's cost.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dspy
from dspy.clients.capabilities import capabilities

from reflect_sql.lm.accounting import CostMeter, lm_scope
from reflect_sql.lm.adapters import other_adapter
from reflect_sql.lm.failures import LMFailure, lm_failures
from reflect_sql.programs.expected_score import TOP_LOGPROBS, expected_scores, truth_probabilities
from reflect_sql.programs.judgment import RUBRICS, checker, placed
from reflect_sql.settings import Settings

COST_KEYS = ("lm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "seconds")


def cost_of(meter: CostMeter) -> dict[str, Any]:
    summary = meter.summary()
    return {key: summary[key] for key in COST_KEYS}


@dataclass
class Call:
    output: dspy.Prediction | None
    failure: str | None = None  # "<kind>: <message>" when the LM gave nothing usable
    cost: dict[str, Any] = field(default_factory=dict)
    retried: str | None = None  # why the reply was asked for again through the other adapter


# ChatAdapter ends a reply with this marker; whatever a model writes after it is never read.
END_OF_REPLY = "[[ ## completed ## ]]"


def make_predictor(signature: type[dspy.Signature], max_tokens: int, *, token_probabilities: bool = False) -> dspy.Predict:
    """A predictor whose replies stop at the end of their last field and within their role's budget.

    With ``token_probabilities`` (a judge under ``judge_scores: expected``) each reply carries its
    tokens' log-probabilities, from which ``call_predictor`` takes the expected scores."""
    extra = {"logprobs": True, "top_logprobs": TOP_LOGPROBS} if token_probabilities else {}
    return dspy.Predict(signature, max_tokens=max_tokens, stop=[END_OF_REPLY], **extra)


def make_judge(signature: type[dspy.Signature], max_tokens: int, settings: Settings) -> dspy.Predict:
    """A judge's predictor: under ``judge_scores: expected`` it asks for token log-probabilities."""
    return make_predictor(signature, max_tokens, token_probabilities=settings.judge_scores == "expected")


def with_expected_scores(output: dspy.Prediction, signature_name: str) -> dspy.Prediction:
    """The reply with each score replaced by its expected value when the reply carries token
    log-probabilities that locate every score; the written integers stay in ``stated_scores``.

    A reply in the checks form gets its score fields here: each True/False answer placed on its
    score's scale (``judgment.placed``), by the probability of True when the tokens give it."""
    rubric = RUBRICS.get(signature_name)
    if rubric is None:
        return output
    logprobs = output.get("logprobs")
    if rubric.checks:
        questions = list(rubric.checks.values())
        stated = placed(rubric, {q: float(bool(output[q])) for q in questions})
        truths = truth_probabilities(logprobs, questions) if logprobs else None
        for name, value in stated.items():
            output[name] = value
        if truths is None:
            return output
        output["stated_scores"] = stated
        for name, value in placed(rubric, truths).items():
            output[name] = value
        return output
    expected = expected_scores(logprobs, rubric.scores) if logprobs else None
    if expected is None:
        return output
    output["stated_scores"] = {name: output[name] for name in rubric.scores}
    for name, value in expected.items():
        output[name] = value
    return output


def _unasked_logprobs(predictor: dspy.Module, lm: dspy.BaseLM | None) -> dict[str, Any]:
    """Per-call config that drops token log-probabilities an LM cannot return (Anthropic's refuse
    the request): a judge on such an LM is read as stated, not failed."""
    if not (getattr(predictor, "config", None) or {}).get("logprobs"):
        return {}
    target = lm or dspy.settings.lm
    try:
        supported = "logprobs" in capabilities(target).params
    except Exception:  # noqa: BLE001 - an LM DSPy cannot describe is asked for nothing extra
        supported = False
    return {} if supported else {"config": {"logprobs": None, "top_logprobs": None}}


def call_predictor(predictor: dspy.Module, scope: str, lm: dspy.BaseLM | None = None, **inputs: Any) -> Call:
    """Run ``predictor(**inputs)`` under ``lm`` (the ambient LM when None) and scope label ``scope``.

    A cassette miss stays fatal: a replay that diverges from its recording must stop loudly.
    """
    meter = CostMeter(scope)
    overrides = {"lm": lm} if lm is not None else {}
    signature_name = getattr(getattr(predictor, "signature", None), "__name__", "")
    check = checker(signature_name)
    retried = None
    try:
        with meter, lm_scope(scope), dspy.context(**overrides), lm_failures():
            inputs = {**inputs, **_unasked_logprobs(predictor, lm)}
            output = predictor(**inputs)
            retried = check(output) if check is not None else None
            if retried is not None:
                with dspy.context(adapter=other_adapter(dspy.settings.adapter)):
                    output = predictor(**inputs)
                still = check(output)
                if still is not None:
                    return Call(None, f"judgment: {still} (also after a retry through the other adapter)",
                                cost_of(meter), retried)
    except LMFailure as failure:
        if failure.fatal:
            raise
        return Call(None, f"{failure.kind}: {failure.message}", cost_of(meter), retried)
    return Call(with_expected_scores(output, signature_name), None, cost_of(meter), retried)
