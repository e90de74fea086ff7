"""The one verification policy: when an answer is fully verified and so may teach the KB (paper
section 3).

An answer is fully verified when every judgment in ``judgments_for`` passes by the KB's own rule
(``kb.enrich.judgment_failure``). Those judgments are also exactly what the KB is sent and
re-checks, so the program's decision and the KB's cannot disagree unless the KB's schema does.
"""
from __future__ import annotations

from typing import Any

from reflect_sql.kb.enrich import judgment_failure
from reflect_sql.programs.candidate import Candidate
from reflect_sql.programs.checks import CHECKS
from reflect_sql.settings import Settings


def judgments_for(c: Candidate, settings: Settings) -> dict[str, Any]:
    """check name -> {"score", "threshold"} or {"passed"}: what kb.enrich verifies and logs as provenance."""
    out: dict[str, Any] = {}
    for name, score, threshold in (("retrieval", c.retrieval_score, settings.theta_r),
                                   ("semantic", c.semantic_score, settings.theta_s),
                                   ("entailment", c.entailment_score, settings.theta_e)):
        if score is not None:
            out[name] = {"score": score, "threshold": threshold}
    if c.passed_semantic is False:  # a semantic judge whose call failed left no score, only this fail
        out.setdefault("semantic", {"passed": False})
    # Verified means entailed: without an entailment score (judge failed, or entailment off) it is not.
    out.setdefault("entailment", {"passed": bool(c.passed_entailment)})
    if c.compiles is not None:
        out["compiles"] = {"passed": c.compiles}
    out["executes"] = {"passed": c.result is not None}
    fired = {f.check for f in c.findings}
    for name in CHECKS:  # a check that did not fire is recorded as passed
        out[f"check.{name}"] = {"passed": name not in fired}
    for f in c.findings:  # a finding outside the registry (the engine's execution_error) still counts
        out.setdefault(f"check.{f.check}", {"passed": False})
    return out


def fully_verified(c: Candidate, settings: Settings) -> bool:
    """Only a fully verified answer may teach the KB: a warning or a judge below threshold bars it."""
    return all(judgment_failure(name, judgment) is None for name, judgment in judgments_for(c, settings).items())
