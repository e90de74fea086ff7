"""A zero-latency oracle LM for measuring and testing the harness and the pipeline without a model.

The generator answers each question with its gold SQL and every judge gives its top score, so a
run takes the pipeline's full successful path (each loop once) and costs only framework, retrieval
and database time. ``wrong`` lists question texts to answer with a wrong query instead, to exercise
the judges' feedback paths (the judges then give low scores to those questions).
"""
from __future__ import annotations

from typing import Any, Iterable

from reflect_sql.experiments.datasets import Question
from reflect_sql.lm.scripted import ScriptedLM

PASSING_REPLIES = {
    "RetrievalJudge": {"missing_aspects": [], "relevance": 10, "completeness": 10, "rewritten_question": ""},
    "SemanticJudge": {"column_rationale": "ok", "column_consistency": 10, "granularity_rationale": "ok",
                      "granularity": 10, "join_rationale": "ok", "join_consistency": 10, "logic_rationale": "ok",
                      "query_logic": 10, "diagnosis": "none"},
    "EntailmentJudge": {"e_schema": 5, "e_data": 5, "diagnosis": "none"},
}
_FAIL = {
    "SemanticJudge": {**PASSING_REPLIES["SemanticJudge"], "query_logic": 2, "diagnosis": "the filter is wrong"},
    "EntailmentJudge": {"e_schema": 2, "e_data": 1, "diagnosis": "the result cannot be the answer"},
}
WRONG_SQL = "SELECT 0 WHERE 0"


def oracle_script(questions: Iterable[Question], wrong: Iterable[str] = ()):
    gold = {q.question.strip(): q.gold_sql for q in questions}
    wrong = {w.strip() for w in wrong}

    def script(signature: str, inputs: dict[str, str]) -> dict[str, Any]:
        question = inputs.get("question", "").strip()
        if signature == "GenerateSQL":
            return {"sql": WRONG_SQL if question in wrong else gold.get(question, WRONG_SQL)}
        if signature == "RepairSQL":
            return {"repaired_sql": gold.get(question, WRONG_SQL)}
        if question in wrong and signature in _FAIL:
            return _FAIL[signature]
        if signature in PASSING_REPLIES:
            return PASSING_REPLIES[signature]
        raise KeyError(f"the oracle has no reply for signature {signature!r}")

    return script


def oracle_lms(questions: Iterable[Question], wrong: Iterable[str] = ()):
    """(generator, judge) scripted LMs sharing one oracle script."""
    questions = list(questions)
    script = oracle_script(questions, wrong)
    return ScriptedLM(script, role="generator"), ScriptedLM(script, role="judge")
