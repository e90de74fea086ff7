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
    evidence_unused: int | None = None  # evidence clauses whose columns the SQL never uses; None: not checked
    passed_entailment: bool | None = None

    def scores(self) -> dict[str, float | None]:
        return {"retrieval": self.retrieval_score, "semantic": self.semantic_score, "entailment": self.entailment_score}


def normalise_sql(sql: str) -> str:
    """The form in which two generations count as the same SQL: whitespace and a final ';' do not count."""
    return " ".join(sql.split()).rstrip(";").rstrip()


@dataclass
class CandidatePool:
    """Everything one question produced: the SQL the generator wrote (to see repeats), the prompts it
    was sent (never to send one again unchanged), and every candidate that compiled, across all
    rounds and loops, for selection (``programs/selection.py``)."""

    candidates: list[Candidate] = field(default_factory=list)
    generated: set[str] = field(default_factory=set)
    prompts: set[str] = field(default_factory=set)
    repeats: int = 0  # generations that returned SQL already generated for this question
    samples: int = 0  # sampled generations; each had its own rollout id

    def add(self, candidate: Candidate) -> None:
        if candidate.compiles is False or any(c.sql == candidate.sql for c in self.candidates):
            return
        self.candidates.append(candidate)

    def adopt(self, final: Candidate) -> None:
        """The loops' answer joins the pool in place of a candidate with its SQL (an extra sample the
        loops' generation repeated, which no judge saw), so that selection weighs its judgments and
        can tell when it kept it."""
        if final.compiles is False:
            return
        for i, c in enumerate(self.candidates):
            if c.sql == final.sql:
                self.candidates[i] = final
                return
        self.candidates.append(final)

    def is_new(self, sql: str) -> bool:
        return normalise_sql(sql) not in self.generated

    def remember(self, sql: str) -> None:
        self.generated.add(normalise_sql(sql))


def _score(value: float | None) -> float:
    return -math.inf if value is None else value


def synthesis_rank(c: Candidate) -> tuple:
    """Before execution: SQL that compiles beats SQL that does not, then SQL that ignores fewer evidence
    clauses (a deterministic finding, when checked), then the higher S."""
    return (c.compiles is not False, -(c.evidence_unused or 0), _score(c.semantic_score), _score(c.retrieval_score))


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
