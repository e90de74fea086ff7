"""Choosing the answer from a question's candidate pool (setting ``selection``).

The pool holds every SQL of the question that compiled, across all rounds and loops, each with its
execution result, its judge scores and its check findings. Three rules:

- ``paper``: the paper's rule. The first candidate that passes every threshold is the answer (the
  pipeline stops there); when none does, the best by ``candidate.final_rank`` (a result beats an
  error, then the higher E, then the higher S).
- ``vote``: self-consistency. Candidates whose results agree (same columns count and the same rows
  as a multiset, ``result_digest``) form a group; the largest group wins, ties broken by the best
  ``final_rank`` inside each group, and the group's best candidate is the answer. Candidates with an
  empty result vote only when no candidate returned a row: "no rows" is where wrong queries agree
  most easily.
- ``judge_vote``: groups as for ``vote``, ranked by

      score(g) = vote_weight_agreement  * |g| / |voters|
               + vote_weight_semantic   * mean over judged members of (S - 1) / 9
               + vote_weight_entailment * mean over judged members of (E - 1) / 4

  A group none of whose members a judge scored gets 0.5 for that judge's term (no evidence either
  way). The weights are settings, so ``tune`` can search them.

A candidate that failed to execute never votes. With no voter at all, every rule falls back to the
best by ``final_rank``.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Callable

from reflect_sql.programs.candidate import Candidate, final_rank
from reflect_sql.settings import Settings
from reflect_sql.signatures.scales import ENTAILMENT_SCALE, SEMANTIC_SCALE, Scale

SELECTIONS = ("paper", "vote", "judge_vote")
NEUTRAL = 0.5


def result_digest(candidate: Candidate) -> str | None:
    """Same digest = same answer: column count and rows as a multiset (order ignored). None without a result."""
    result = candidate.result
    if result is None:
        return None
    rows = sorted(json.dumps([repr(v) for v in row]) for row in result.rows)
    payload = json.dumps([len(result.columns), bool(result.truncated), rows])
    return hashlib.sha1(payload.encode("utf-8")).hexdigest()


@dataclass
class Group:
    digest: str
    members: list[Candidate] = field(default_factory=list)

    @property
    def best(self) -> Candidate:
        # max keeps the first of equals; reversed so that ties go to the later (better informed) candidate
        return max(reversed(self.members), key=final_rank)

    @property
    def empty(self) -> bool:
        return not self.members[0].result.rows


def groups(pool: list[Candidate]) -> list[Group]:
    """Voters grouped by result, in order of first appearance."""
    found: dict[str, Group] = {}
    for c in pool:
        digest = result_digest(c)
        if digest is not None:
            found.setdefault(digest, Group(digest)).members.append(c)
    out = list(found.values())
    if any(not g.empty for g in out):
        out = [g for g in out if not g.empty]
    return out


def _normalised_mean(values: list[float | None], scale: Scale) -> float:
    known = [v for v in values if v is not None]
    if not known:
        return NEUTRAL
    lo, hi = scale.low, scale.high
    return sum((v - lo) / (hi - lo) for v in known) / len(known)


def judge_vote_score(group: Group, voters: int, settings: Settings) -> float:
    return (settings.vote_weight_agreement * len(group.members) / voters
            + settings.vote_weight_semantic * _normalised_mean([c.semantic_score for c in group.members], SEMANTIC_SCALE)
            + settings.vote_weight_entailment * _normalised_mean([c.entailment_score for c in group.members], ENTAILMENT_SCALE))


def _best_of_pool(pool: list[Candidate]) -> Candidate | None:
    return max(reversed(pool), key=final_rank) if pool else None


def select(pool: list[Candidate], settings: Settings) -> tuple[Candidate | None, dict]:
    """(the chosen candidate, what the choice rests on, for the trace)."""
    rule = settings.selection
    found = groups(pool)
    voters = sum(len(g.members) for g in found)
    if rule == "paper" or not found:
        chosen = _best_of_pool(pool)
        return chosen, {"rule": rule, "pool": len(pool), "groups": len(found), "basis": "final rank"}
    key: Callable[[Group], tuple]
    if rule == "vote":
        key = lambda g: (len(g.members), final_rank(g.best))  # noqa: E731
    elif rule == "judge_vote":
        key = lambda g: (judge_vote_score(g, voters, settings), final_rank(g.best))  # noqa: E731
    else:
        raise ValueError(f"unknown selection rule {rule!r}")
    winner = max(found, key=key)
    detail = {"rule": rule, "pool": len(pool), "voters": voters, "groups": len(found),
              "group_sizes": sorted((len(g.members) for g in found), reverse=True), "chosen_group": len(winner.members)}
    if rule == "judge_vote":
        detail["group_score"] = round(judge_vote_score(winner, voters, settings), 4)
    return winner.best, detail
