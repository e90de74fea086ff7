"""The answer told in words (paper section 8: "Bàn số 4 đang đợi món Lẩu Thái 32 phút"): after a
question's program has run, a verified result is turned into one or two sentences in the
question's language by ``WriteAnswer``, and kept only when ``number_check`` finds every number it
states in the result; otherwise the answer is a plain rendering of the result table.

It is a step after the program, not inside it: evaluation scores the SQL and needs no sentence, so
only what shows an answer to a person (``ask``, the chat) pays its LM call.
"""
from __future__ import annotations

from typing import Any

import dspy

from reflect_sql.db.base import QueryResult
from reflect_sql.programs.entailment_loop import result_preview
from reflect_sql.programs.invoke import Call, call_predictor, make_predictor
from reflect_sql.programs.number_check import unsupported_numbers
from reflect_sql.programs.trace import TraceStep
from reflect_sql.settings import Settings
from reflect_sql.signatures.answer_sentence import WriteAnswer

ANSWER_MAX_TOKENS = 160  # two sentences; a small model that rambles stops here
RENDERED_ROWS = 5
RENDERED_CELL_CHARS = 40


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        value = f"{value:.4f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    text = str(value)
    return text if len(text) <= RENDERED_CELL_CHARS else text[: RENDERED_CELL_CHARS - 1] + "…"


def render_table(columns: list[str], rows: list) -> str:
    """The result said plainly, without a model: what the fallback shows."""
    if not rows:
        return "No rows match."
    if len(rows) == 1 and len(columns) == 1:
        return f"{columns[0]}: {_cell(rows[0][0])}."
    shown = ["; ".join(f"{c} {_cell(v)}" for c, v in zip(columns, row)) for row in rows[:RENDERED_ROWS]]
    more = f" … and {len(rows) - RENDERED_ROWS} more" if len(rows) > RENDERED_ROWS else ""
    return f"{len(rows)} row{'s' if len(rows) != 1 else ''}: " + " | ".join(shown) + more + "."


def entailed(prediction: dspy.Prediction, settings: Settings) -> bool:
    """The entailment check passed for the answer returned (its E at or above theta_e)."""
    score = (prediction.scores or {}).get("entailment")
    return prediction.sql is not None and score is not None and score >= settings.theta_e


class AnswerSentence(dspy.Module):
    def __init__(self, settings: Settings, lm: dspy.BaseLM | None = None):
        super().__init__()
        self.settings = settings
        self.lm = lm
        self.writer = make_predictor(WriteAnswer, ANSWER_MAX_TOKENS)

    def forward(self, question: str, prediction: dspy.Prediction) -> dspy.Prediction:
        """``prediction`` with ``answer`` (the sentence, the table rendered, or None when nothing
        was verified), ``answer_source`` ("model", "table" or None), a trace step "answer" and the
        writer's cost added to the question's cost."""
        columns, rows = list(prediction.columns), list(prediction.rows)
        round_ = max((s.get("round", 0) for s in prediction.trace), default=0)
        step = TraceStep("answer", round_, 0, inputs={"sql": prediction.sql})
        answer, source = None, None
        if not entailed(prediction, self.settings):
            step.decision = "no sentence: the result did not pass the entailment check"
        else:
            preview = result_preview(QueryResult(columns, rows))
            try:
                call = call_predictor(self.writer, "answer.write", self.lm, question=question, sql=prediction.sql,
                                      result_preview=preview)
            except Exception as exc:  # noqa: BLE001 - the verified answer is shown whatever the writer did
                call = Call(None, f"{type(exc).__name__}: {exc}")
            step.cost = call.cost
            sentence = " ".join(str(call.output.answer).split()) if call.output is not None else ""
            unbacked = unsupported_numbers(sentence, columns, rows, question) if sentence else []
            if call.output is None:
                step.failure = f"answer writer failed ({call.failure})"
                step.decision = "fallback: the table rendered"
            elif not sentence:
                step.decision = "fallback: the writer gave an empty sentence"
            elif unbacked:
                step.failure = f"number(s) not in the result: {', '.join(unbacked)}"
                step.decision = "fallback: the sentence stated a number the result does not hold"
                step.inputs["refused_sentence"] = sentence
            else:
                answer, source = sentence, "model"
                step.decision = "sentence kept: every number is in the result"
            if answer is None:
                answer, source = render_table(columns, rows), "table"
            _add_cost(prediction.cost, call.cost)
        prediction.trace = [*prediction.trace, step.to_json()]
        prediction.answer, prediction.answer_source = answer, source
        return prediction


def _add_cost(total: dict[str, Any], part: dict[str, Any]) -> None:
    for key, value in part.items():
        if key != "seconds" and isinstance(value, (int, float)):
            total[key] = (total.get(key) or 0) + value
    total["seconds"] = round((total.get("seconds") or 0) + (part.get("seconds") or 0), 3)
