"""KB enrichment from a verified answer (paper section 3): the call to the retriever's enrichment,
with the judgments that verified the answer (``programs/verification.py``).

The KB re-checks every judgment and refuses unless all passed; the program only asks after a fully
verified answer, so a refusal here means the two disagree, and the trace says why.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from reflect_sql.programs.candidate import Candidate
from reflect_sql.programs.retriever import Enricher
from reflect_sql.programs.verification import judgments_for
from reflect_sql.settings import Settings


def enrich(retriever: Any, question: str, evidence: str, c: Candidate, settings: Settings) -> tuple[str, Any]:
    """(decision, detail): "enriched", "refused by the KB" or "skipped: ..." with what the KB said."""
    if not isinstance(retriever, Enricher):
        return "skipped: no knowledge base to enrich", None
    kwargs = dict(question=question, sql=c.sql, result=c.result, judgments=judgments_for(c, settings))
    # Evidence is optional in the protocol: an enricher that takes it keeps it with the example.
    if "evidence" in inspect.signature(retriever.enrich).parameters:
        kwargs["evidence"] = evidence
    outcome = retriever.enrich(**kwargs)
    if dataclasses.is_dataclass(outcome):
        outcome = dataclasses.asdict(outcome)
    if isinstance(outcome, dict) and outcome.get("accepted") is False:
        return "refused by the KB", outcome
    return "enriched", outcome
