"""Calling one predictor: on its role's LM, labelled for accounting, with its cost measured, and
with bad LM output turned into a recorded failure instead of an exception."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import dspy

from reflect_sql.lm.accounting import CostMeter, lm_scope
from reflect_sql.lm.failures import LMFailure, lm_failures

COST_KEYS = ("lm_calls", "prompt_tokens", "completion_tokens", "seconds")


def cost_of(meter: CostMeter) -> dict[str, Any]:
    summary = meter.summary()
    return {key: summary[key] for key in COST_KEYS}


@dataclass
class Call:
    output: dspy.Prediction | None
    failure: str | None = None  # "<kind>: <message>" when the LM gave nothing usable
    cost: dict[str, Any] = field(default_factory=dict)


def call_predictor(predictor: dspy.Module, scope: str, lm: dspy.BaseLM | None = None, **inputs: Any) -> Call:
    """Run ``predictor(**inputs)`` under ``lm`` (the ambient LM when None) and scope label ``scope``.

    A cassette miss stays fatal: a replay that diverges from its recording must stop loudly.
    """
    meter = CostMeter(scope)
    overrides = {"lm": lm} if lm is not None else {}
    try:
        with meter, lm_scope(scope), dspy.context(**overrides), lm_failures():
            output = predictor(**inputs)
    except LMFailure as failure:
        if failure.fatal:
            raise
        return Call(None, f"{failure.kind}: {failure.message}", cost_of(meter))
    return Call(output, None, cost_of(meter))
