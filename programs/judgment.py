"""When a judge's reply is a judgment: its scores lie on their scales and do not contradict its words.

Small models fail in a way a parser cannot see: every score field reads the bottom of its scale
while the diagnosis says "none", or the retrieval judge gives R = C = 1 and lists nothing missing.
Such a reply rejects without a reason, which the loops cannot act on and which is wrong more often
than not (the embedded 1.5B did it to correct SQL). It is treated like an unparsable reply:
retried once through the other adapter (a different prompt), and a failure if that contradicts
itself too (``programs/invoke.py``). An integer outside its scale is malformed in the same way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reflect_sql.signatures.scales import ENTAILMENT_SCALE, RETRIEVAL_SCALE, SEMANTIC_SCALE, Scale

NOTHING_WRONG = {"", "none", "n/a", "na", "nothing", "no problems", "no issues", "nothing is wrong", "[]"}


@dataclass(frozen=True)
class Rubric:
    scores: dict[str, Scale]  # score field -> its scale
    reason_field: str  # the field that must name a problem when the scores reject
    # The checks form (``judge_form: checks``): score field -> the True/False field asked instead.
    # A true answer is the top of the score's scale and a false one the bottom; under
    # ``judge_scores: expected`` the probability of True places it in between.
    checks: dict[str, str] = field(default_factory=dict)

    def asked(self) -> dict[str, Any]:
        """The fields the reply must hold a judgment in, with what each must be (a scale, or bool)."""
        return {question: bool for question in self.checks.values()} if self.checks else dict(self.scores)


_SEMANTIC = {"column_consistency": SEMANTIC_SCALE, "granularity": SEMANTIC_SCALE,
             "join_consistency": SEMANTIC_SCALE, "query_logic": SEMANTIC_SCALE}
_ENTAILMENT = {"e_schema": ENTAILMENT_SCALE, "e_data": ENTAILMENT_SCALE}
RUBRICS = {
    "RetrievalJudge": Rubric({"relevance": RETRIEVAL_SCALE, "completeness": RETRIEVAL_SCALE}, "missing_aspects"),
    "SemanticJudge": Rubric(_SEMANTIC, "diagnosis"),
    "SemanticChecks": Rubric(_SEMANTIC, "diagnosis", {"column_consistency": "columns_right", "granularity":
                             "granularity_right", "join_consistency": "joins_right", "query_logic": "logic_right"}),
    "EntailmentJudge": Rubric(_ENTAILMENT, "diagnosis"),
    "EntailmentChecks": Rubric(_ENTAILMENT, "diagnosis", {"e_schema": "schema_right", "e_data": "data_right"}),
}


def says_nothing_is_wrong(reason: Any) -> bool:
    if reason is None:
        return True
    if isinstance(reason, (list, tuple)):
        return all(says_nothing_is_wrong(r) for r in reason)
    return str(reason).strip().strip(".!").strip().lower() in NOTHING_WRONG


def problem(rubric: Rubric, output: Any) -> str | None:
    """Why ``output`` is not a usable judgment under ``rubric``, or None when it is."""
    values = {name: getattr(output, name, None) for name in rubric.asked()}
    for name, wanted in rubric.asked().items():
        value = values[name]
        if wanted is bool and not isinstance(value, bool):
            return f"{name}={value!r} is not True or False"
        if wanted is not bool and not wanted.contains(value):
            return f"{name}={value!r} is not an integer from {wanted.low} to {wanted.high}"
    bottom = (lambda name: values[name] is False) if rubric.checks else (lambda name: values[name] == rubric.scores[name].low)
    if all(bottom(name) for name in values) and says_nothing_is_wrong(getattr(output, rubric.reason_field, None)):
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        what = "answer" if rubric.checks else "score"
        return f"self-contradiction: every {what} at the bottom ({shown}) but {rubric.reason_field} names no problem"
    return None


def placed(rubric: Rubric, answers: dict[str, float]) -> dict[str, float]:
    """The checks form's answers (each question's probability of True, or 1.0 / 0.0 as written) as
    scores on their scales: the top for a sure True, the bottom for a sure False."""
    return {score: round(rubric.scores[score].low + answers[question] * (rubric.scores[score].high - rubric.scores[score].low), 3)
            for score, question in rubric.checks.items()}


def checker(signature_name: str):
    """The check ``call_predictor`` runs on a reply of this signature (None for non-judges)."""
    rubric = RUBRICS.get(signature_name)
    if rubric is None:
        return None
    return lambda output: problem(rubric, output)
