"""One verification policy: what the program calls fully verified is what the KB is sent and accepts,
and the check names in it come from the check registry."""
import pytest

from paper_settings import Settings
from reflect_sql.db.base import QueryResult
from reflect_sql.kb.enrich import judgment_failure
from reflect_sql.programs import checks
from reflect_sql.programs.candidate import Candidate
from reflect_sql.programs.checks import CHECKS, Finding, check_result
from reflect_sql.programs.verification import fully_verified, judgments_for

RESULT = QueryResult(columns=["name"], rows=[("North",)])


def verified(**changes) -> Candidate:
    """A candidate every judge passed (paper thresholds r 4, s 5, e 3), with ``changes`` applied."""
    fields = dict(sql="SELECT name FROM stores", round=0, retrieval_score=7.0, compiles=True, semantic_score=8.0,
                  passed_semantic=True, result=RESULT, entailment_score=4.5, passed_entailment=True)
    return Candidate(**{**fields, **changes})


def kb_accepts(judgments) -> bool:
    return bool(judgments) and all(judgment_failure(name, j) is None for name, j in judgments.items())


@pytest.mark.parametrize("changes, expected", [
    ({}, True),
    ({"findings": [Finding("result_too_large", "warning", "3 rows")]}, False),
    ({"findings": [Finding("integer_division", "error", "a / b")]}, False),
    ({"findings": [Finding("execution_error", "error", "no such column")]}, False),
    ({"semantic_score": 2.0, "passed_semantic": False}, False),
    ({"semantic_score": None, "passed_semantic": False}, False),  # the semantic judge's call failed
    ({"semantic_score": None, "passed_semantic": None}, True),  # semantic reflection off
    ({"compiles": False}, False),
    ({"compiles": None}, True),  # syntax reflection off
    ({"retrieval_score": 3.0}, False),
    ({"retrieval_score": None}, True),  # retrieval loop off
    ({"entailment_score": 2.0, "passed_entailment": False}, False),
    ({"entailment_score": None, "passed_entailment": False}, False),  # the entailment judge's call failed
    ({"entailment_score": None, "passed_entailment": None}, False),  # entailment off: nothing verified
    ({"result": None}, False),
])
def test_fully_verified_is_exactly_what_the_kb_would_accept(changes, expected):
    c = verified(**changes)
    assert fully_verified(c, Settings()) is expected
    assert kb_accepts(judgments_for(c, Settings())) is expected


def test_every_registered_check_is_a_judgment():
    judgments = judgments_for(verified(), Settings())
    assert {name for name in judgments if name.startswith("check.")} == {f"check.{name}" for name in CHECKS}


def test_a_newly_registered_check_joins_the_policy_without_another_edit(monkeypatch):
    monkeypatch.setitem(CHECKS, "negative_count", "error")
    assert judgments_for(verified(), Settings())["check.negative_count"] == {"passed": True}
    fired = verified(findings=[checks._found("negative_count", "COUNT(*) cannot be negative")])
    assert fired.findings[0].severity == "error"
    assert judgments_for(fired, Settings())["check.negative_count"] == {"passed": False}
    assert not fully_verified(fired, Settings())


def test_a_finding_can_only_name_a_registered_check():
    with pytest.raises(KeyError):
        checks._found("not_a_check", "")


def test_every_finding_of_the_checks_carries_its_registered_severity():
    findings = check_result("How many distinct names are there?", "SELECT name FROM t", ["name"],
                            [(None,), (None,)], truncated=True)
    assert {f.check for f in findings} == {"all_null_column", "duplicate_rows", "result_too_large"}
    assert all(f.severity == CHECKS[f.check] for f in findings)
