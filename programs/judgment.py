"""When a judge's reply is a judgment: its scores lie on their scales and do not contradict its words.

Small models fail in a way a parser cannot see: every score field reads the bottom of its scale
while the diagnosis says "none", or the retrieval judge gives R = C = 1 and lists nothing missing.
Such a reply rejects without a reason, which the loops cannot act on and which is wrong more often
than not (the embedded 1.5B did it to correct SQL). It is treated like an unparsable reply:
retried once through the other adapter (a different prompt), and a failure if that contradicts
itself too (``programs/invoke.py``). An integer outside its scale is malformed in the same way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reflect_sql.signatures.scales import ENTAILMENT_SCALE, RETRIEVAL_SCALE, SEMANTIC_SCALE, Scale

NOTHING_WRONG = {"", "none", "n/a", "na", "nothing", "no problems", "no issues", "nothing is wrong", "[]"}


@dataclass(frozen=True)
class Rubric:
    scores: dict[str, Scale]  # score field -> its scale
    reason_field: str  # the field that must name a problem when the scores reject


RUBRICS = {
    "RetrievalJudge": Rubric({"relevance": RETRIEVAL_SCALE, "completeness": RETRIEVAL_SCALE}, "missing_aspects"),
    "SemanticJudge": Rubric({"column_consistency": SEMANTIC_SCALE, "granularity": SEMANTIC_SCALE,
                             "join_consistency": SEMANTIC_SCALE, "query_logic": SEMANTIC_SCALE}, "diagnosis"),
    "EntailmentJudge": Rubric({"e_schema": ENTAILMENT_SCALE, "e_data": ENTAILMENT_SCALE}, "diagnosis"),
}


def says_nothing_is_wrong(reason: Any) -> bool:
    if reason is None:
        return True
    if isinstance(reason, (list, tuple)):
        return all(says_nothing_is_wrong(r) for r in reason)
    return str(reason).strip().strip(".!").strip().lower() in NOTHING_WRONG


def problem(rubric: Rubric, output: Any) -> str | None:
    """Why ``output`` is not a usable judgment under ``rubric``, or None when it is."""
    values = {name: getattr(output, name, None) for name in rubric.scores}
    for name, value in values.items():
        if not rubric.scores[name].contains(value):
            scale = rubric.scores[name]
            return f"{name}={value!r} is not an integer from {scale.low} to {scale.high}"
    if all(values[name] == scale.low for name, scale in rubric.scores.items()) and \
            says_nothing_is_wrong(getattr(output, rubric.reason_field, None)):
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        return f"self-contradiction: every score at the bottom ({shown}) but {rubric.reason_field} names no problem"
    return None


def checker(signature_name: str):
    """The check ``call_predictor`` runs on a reply of this signature (None for non-judges)."""
    rubric = RUBRICS.get(signature_name)
    if rubric is None:
        return None
    return lambda output: problem(rubric, output)
