"""The output contract every program honours, and its JSON form (what ``reflect-sql ask --json`` prints).

``program(question=..., evidence="")`` returns a ``dspy.Prediction`` with:
  sql (str | None), columns (list[str]), rows (list of tuples), scores ({"retrieval", "semantic",
  "entailment"}: float | None each), trace (list of JSON-safe dicts), cost ({"lm_calls",
  "prompt_tokens", "completion_tokens", "seconds"}), error (str | None) and retrieved
  ({"tables": [...], "columns": ["table.column", ...]}).
After ``programs/answer_sentence.py`` has told it in words, it also has ``answer`` (str | None) and
``answer_source`` ("model", "table" or None), and its JSON form carries both.
``cost["seconds"]`` is the wall-clock time of the whole question (LM, retrieval and database);
each trace step's ``cost["seconds"]`` is the time its LM calls took.
"""
from __future__ import annotations

import time
from typing import Any

import dspy

from reflect_sql.lm.accounting import CostMeter
from reflect_sql.programs.candidate import Candidate
from reflect_sql.programs.invoke import cost_of
from reflect_sql.programs.trace import Trace, json_safe

SCORE_KEYS = ("retrieval", "semantic", "entailment")


def make_prediction(candidate: Candidate | None, trace: Trace, meter: CostMeter, started: float,
                    context: Any = None, error: str | None = None) -> dspy.Prediction:
    """Build the contract from the chosen candidate (None when no SQL was produced at all)."""
    result = candidate.result if candidate is not None else None
    if candidate is not None and result is None and error is None:
        error = candidate.execution_error or (f"does not compile: {candidate.compile_error}" if candidate.compiles is False else None)
    context = candidate.context if candidate is not None and candidate.context is not None else context
    cost = cost_of(meter)
    cost["seconds"] = round(time.perf_counter() - started, 3)
    return dspy.Prediction(
        sql=candidate.sql if candidate is not None else None,
        columns=list(result.columns) if result is not None else [],
        rows=list(result.rows) if result is not None else [],
        scores=candidate.scores() if candidate is not None else dict.fromkeys(SCORE_KEYS),
        trace=trace.to_json(),
        cost=cost,
        error=error,
        retrieved={"tables": list(getattr(context, "tables", []) or []),
                   "columns": list(getattr(context, "columns", []) or [])},
    )


def prediction_to_json(pred: dspy.Prediction) -> dict[str, Any]:
    """``{"sql", "columns", "rows", "scores", "trace", "cost"}``, plus ``"answer"`` and ``"answer_source"``
    once the answer was told in words, and ``"error"`` when there is one."""
    out = {
        "sql": pred.sql,
        "columns": list(pred.columns),
        "rows": json_safe([list(r) for r in pred.rows]),
        "scores": {k: pred.scores.get(k) for k in SCORE_KEYS},
        "trace": json_safe(pred.trace),
        "cost": dict(pred.cost),
    }
    if "answer" in pred.keys():
        out["answer"] = pred.answer
        out["answer_source"] = pred.answer_source
    if getattr(pred, "error", None):
        out["error"] = pred.error
    return out
