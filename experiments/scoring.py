"""Score a set of predictions against a dataset's gold queries (what ``reflect-sql score`` runs)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from reflect_sql.experiments.datasets import Question
from reflect_sql.experiments.metrics import DEFAULT_TIMEOUT_S, Match, Scorer, accuracy_table


@dataclass(frozen=True)
class Scored:
    question: Question
    sql: str | None
    match: Match


def score_predictions(
    fmt: str,
    questions: list[Question],
    predictions: Mapping[str, str | None],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    threads: int = 1,
    keep_distinct: bool = False,
) -> tuple[dict[str, Any], list[Scored]]:
    """The ``score --json`` table and one ``Scored`` per question, in question order.

    ``keep_distinct``: Spider only, the test-suite evaluator's option (DISTINCT is removed from
    both queries otherwise)."""
    with Scorer(fmt, timeout_s, keep_distinct=keep_distinct) as scorer:

        def one(q: Question) -> Scored:
            sql = predictions.get(q.key)
            return Scored(q, sql, scorer.match(sql, q.gold_sql, q.db_path))

        if threads <= 1:
            # In this thread: handing each question to a worker thread and waiting for it made the
            # process wait for the scheduler twice per question.
            scored = [one(q) for q in questions]
        else:
            from concurrent.futures import ThreadPoolExecutor  # 10 ms (logging) the default of 1 thread never pays

            # sqlite3 releases the GIL while a query runs, so threads overlap the slow queries.
            with ThreadPoolExecutor(max_workers=threads) as pool:
                scored = list(pool.map(one, questions))
    table = accuracy_table(((s.question.difficulty, s.match.correct) for s in scored), by_difficulty=fmt == "bird")
    return table, scored
