"""A candidate answer as it moves through the loops, and how candidates are ranked when a cap is hit."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from reflect_sql.db.base import QueryResult
from reflect_sql.programs.checks import Finding


@dataclass
class Candidate:
    sql: str
    round: int
    context: Any = None  # the RetrievedContext it was written from
    retrieval_score: float | None = None
    compiles: bool | None = None  # None: not compiled (syntax reflection off)
    compile_error: str | None = None
    semantic_score: float | None = None
    semantic: dict[str, Any] = field(default_factory=dict)  # per-criterion scores and rationales
    result: QueryResult | None = None
    execution_error: str | None = None
    findings: list[Finding] = field(default_factory=list)
    entailment_score: float | None = None
    entailment: dict[str, Any] = field(default_factory=dict)  # E_schema, E_data, diagnosis
    passed_semantic: bool | None = None  # None: not judged
    passed_entailment: bool | None = None

    def scores(self) -> dict[str, float | None]:
        return {"retrieval": self.retrieval_score, "semantic": self.semantic_score, "entailment": self.entailment_score}


def _score(value: float | None) -> float:
    return -math.inf if value is None else value


def synthesis_rank(c: Candidate) -> tuple:
    """Before execution: SQL that compiles beats SQL that does not, then the higher S."""
    return (c.compiles is not False, _score(c.semantic_score), _score(c.retrieval_score))


def final_rank(c: Candidate) -> tuple:
    """After execution: a result beats an error, then the higher E, then the higher S."""
    return (c.result is not None, _score(c.entailment_score), *synthesis_rank(c))


def better(best: Candidate | None, challenger: Candidate | None, rank=final_rank) -> Candidate | None:
    """Ties go to the challenger: it was written with more feedback."""
    if challenger is None:
        return best
    if best is None or rank(challenger) >= rank(best):
        return challenger
    return best
