"""KB enrichment from a verified answer (paper section 3): the judgments in the form the KB checks,
and the call to whichever enrichment the retriever offers.

The KB re-checks every judgment and refuses unless all passed; the program only asks after a fully
verified answer, so a refusal here means the two disagree, and the trace says why.
"""
from __future__ import annotations

import dataclasses
import inspect
import sys
from typing import Any

from reflect_sql.programs.candidate import Candidate
from reflect_sql.settings import Settings

# Every deterministic check by name, so a check that did not fire is recorded as passed.
CHECKS = ("empty_result", "all_null_column", "integer_division", "division_by_zero", "duplicate_rows",
          "result_too_large", "result_truncated")


def judgments_for(c: Candidate, settings: Settings) -> dict[str, Any]:
    """check name -> {"score", "threshold"} or {"passed"}: what kb.enrich verifies and logs as provenance."""
    out: dict[str, Any] = {}
    for name, score, threshold in (("retrieval", c.retrieval_score, settings.theta_r),
                                   ("semantic", c.semantic_score, settings.theta_s),
                                   ("entailment", c.entailment_score, settings.theta_e)):
        if score is not None:
            out[name] = {"score": score, "threshold": threshold}
    if c.compiles is not None:
        out["compiles"] = {"passed": c.compiles}
    out["executes"] = {"passed": c.result is not None}
    fired = {f.check for f in c.findings}
    for name in CHECKS:
        out[f"check.{name}"] = {"passed": name not in fired}
    for f in c.findings:  # anything not in CHECKS still counts
        out.setdefault(f"check.{f.check}", {"passed": False})
    return out


def _kb_dir(retriever: Any):
    """The KB directory of a ``reflect_sql.kb`` retriever, or None for any other retriever."""
    module = sys.modules.get("reflect_sql.kb.retrieve")
    if module is not None and isinstance(retriever, module.Retriever):
        return retriever.path
    return None


def enrich(retriever: Any, question: str, evidence: str, c: Candidate, settings: Settings) -> tuple[str, Any]:
    """(decision, detail): "enriched", "refused by the KB" or "skipped: ..." with what the KB said."""
    judgments = judgments_for(c, settings)
    own = getattr(retriever, "enrich", None)
    if own is not None:
        kwargs = dict(question=question, sql=c.sql, result=c.result, judgments=judgments)
        if "evidence" in inspect.signature(own).parameters:
            kwargs["evidence"] = evidence
        outcome = own(**kwargs)
    elif (kb_dir := _kb_dir(retriever)) is not None:
        from reflect_sql.kb.enrich import enrich as kb_enrich

        outcome = kb_enrich(kb_dir, question, c.sql, c.result, judgments, evidence=evidence)
    else:
        return "skipped: no knowledge base to enrich", None
    if dataclasses.is_dataclass(outcome):
        outcome = dataclasses.asdict(outcome)
    if isinstance(outcome, dict) and outcome.get("accepted") is False:
        return "refused by the KB", outcome
    return "enriched", outcome
