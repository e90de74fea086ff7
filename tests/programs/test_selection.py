"""Selection over a hand-built candidate pool: paper, vote and judge_vote."""
from __future__ import annotations

import pytest

from reflect_sql.db.base import QueryResult
from reflect_sql.programs.candidate import Candidate
from reflect_sql.programs.selection import groups, judge_vote_score, result_digest, select
from reflect_sql.settings import Settings


def cand(sql, rows=None, *, columns=("n",), s=None, e=None, error=None):
    c = Candidate(sql=sql, round=0, compiles=True, semantic_score=s, entailment_score=e)
    if error is not None:
        c.execution_error = error
    else:
        c.result = QueryResult(list(columns), [tuple(r) for r in rows])
    return c


def test_digest_ignores_row_order_but_not_duplicates_or_columns():
    a = cand("a", [(1,), (2,)])
    assert result_digest(a) == result_digest(cand("b", [(2,), (1,)]))
    assert result_digest(a) != result_digest(cand("c", [(1,), (2,), (2,)]))
    assert result_digest(a) != result_digest(cand("d", [(1, 1), (2, 2)], columns=("n", "m")))
    assert result_digest(cand("e", error="no such column")) is None
    assert result_digest(cand("f", [(1,)])) != result_digest(cand("g", [("1",)]))  # 1 and '1' are not one answer


def test_paper_takes_the_best_by_final_rank_and_ignores_agreement():
    pool = [cand("a", [(44,)], s=6, e=4.0), cand("b", [(44,)], s=6, e=3.0), cand("c", [(45,)], s=9, e=4.6)]
    chosen, detail = select(pool, Settings(selection="paper"))
    assert chosen.sql == "c" and detail["rule"] == "paper"


def test_vote_takes_the_largest_agreeing_group_and_its_best_member():
    pool = [cand("lone", [(45,)], s=9, e=4.6), cand("x", [(44,)], s=5, e=3.0), cand("y", [(44,)], s=7, e=3.4),
            cand("broken", error="syntax error")]
    chosen, detail = select(pool, Settings(selection="vote"))
    assert chosen.sql == "y"  # the higher E inside the winning group
    assert detail["voters"] == 3 and detail["group_sizes"] == [2, 1] and detail["chosen_group"] == 2


def test_vote_ties_go_to_the_better_ranked_group_and_empty_results_vote_last():
    tie = [cand("a", [(1,)], e=2.0), cand("b", [(2,)], e=4.0)]
    assert select(tie, Settings(selection="vote"))[0].sql == "b"
    empties = [cand("e1", []), cand("e2", []), cand("e3", []), cand("rows", [(7,)], e=1.0)]
    assert select(empties, Settings(selection="vote"))[0].sql == "rows"
    assert len(groups(empties)) == 1
    only_empty = [cand("e1", [], e=2.0), cand("e2", [], e=3.0)]
    assert select(only_empty, Settings(selection="vote"))[0].sql == "e2"


def test_judge_vote_weighs_agreement_against_the_judges():
    # Two agreeing candidates the judges dislike against one they like.
    pool = [cand("x", [(44,)], s=2, e=1.5), cand("y", [(44,)], s=3, e=1.0), cand("z", [(45,)], s=10, e=5.0)]
    agreement = Settings(selection="judge_vote", vote_weight_agreement=1.0, vote_weight_semantic=0.0,
                         vote_weight_entailment=0.0)
    judges = Settings(selection="judge_vote", vote_weight_agreement=0.2, vote_weight_semantic=0.4,
                      vote_weight_entailment=0.4)
    assert select(pool, agreement)[0].sql in {"x", "y"}
    chosen, detail = select(pool, judges)
    assert chosen.sql == "z"
    # 0.2 * 1/3 + 0.4 * (10 - 1) / 9 + 0.4 * (5 - 1) / 4
    assert detail["group_score"] == pytest.approx(0.2 / 3 + 0.4 + 0.4, abs=1e-4)


def test_unjudged_groups_count_as_neutral():
    (group,) = groups([cand("a", [(1,)])])
    score = judge_vote_score(group, 1, Settings(vote_weight_agreement=0.5, vote_weight_semantic=0.25,
                                                vote_weight_entailment=0.25))
    assert score == pytest.approx(0.5 + 0.25 * 0.5 + 0.25 * 0.5)


def test_a_pool_without_voters_falls_back_to_the_best_candidate():
    pool = [cand("a", error="x", s=3), cand("b", error="y", s=8)]
    for rule in ("paper", "vote", "judge_vote"):
        assert select(pool, Settings(selection=rule))[0].sql == "b"
    assert select([], Settings(selection="vote"))[0] is None
