"""Train/eval disjointness: few-shot demos drawn from the evaluated questions would leak answers.

Two questions are the same when they share the database and either the question id or the
question text (case and whitespace folded): the same question can appear in two files under
different ids, and one file's ids are unique, so either match is a leak.
"""
from __future__ import annotations

import re
from typing import Iterable, Protocol

from reflect_sql.errors import UserError

_SHOWN = 5


class QuestionLike(Protocol):
    question_id: int | str
    db_id: str
    question: str


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def overlap(train: Iterable[QuestionLike], evaluated: Iterable[QuestionLike]) -> list[tuple[QuestionLike, QuestionLike]]:
    """``(train_question, eval_question)`` pairs that are the same question."""
    by_id = {}
    by_text = {}
    for q in evaluated:
        by_id.setdefault((q.db_id, str(q.question_id)), q)
        by_text.setdefault((q.db_id, _norm(q.question)), q)
    pairs = []
    for t in train:
        hit = by_id.get((t.db_id, str(t.question_id))) or by_text.get((t.db_id, _norm(t.question)))
        if hit is not None:
            pairs.append((t, hit))
    return pairs


def check_disjoint(train: list[QuestionLike], evaluated: list[QuestionLike]) -> None:
    """Raise UserError naming the overlapping questions, if any."""
    pairs = overlap(train, evaluated)
    if not pairs:
        return
    shown = "; ".join(
        f"train {t.db_id}#{t.question_id} = eval {e.db_id}#{e.question_id} ({t.question[:60]!r})"
        for t, e in pairs[:_SHOWN]
    )
    more = f"; and {len(pairs) - _SHOWN} more" if len(pairs) > _SHOWN else ""
    raise UserError(
        f"the train split overlaps the evaluated questions in {len(pairs)} of {len(train)} train questions: "
        f"{shown}{more}. Choose disjoint splits (different files, db_ids or seeds, or exclude the eval questions)"
    )


def exclude(pool: list[QuestionLike], evaluated: list[QuestionLike]) -> list[QuestionLike]:
    """``pool`` without the questions that are also evaluated."""
    leaked = {id(t) for t, _ in overlap(pool, evaluated)}
    return [q for q in pool if id(q) not in leaked]
