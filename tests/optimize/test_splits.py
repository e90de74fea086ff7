from dataclasses import dataclass

import pytest

from reflect_sql.errors import UserError
from reflect_sql.optimize.splits import check_disjoint, exclude, overlap


@dataclass(frozen=True)
class Q:
    question_id: int | str
    db_id: str
    question: str


TRAIN = [Q(1, "club", "How many members are there?"), Q(2, "club", "List the events in 2019.")]


def test_disjoint_splits_pass():
    check_disjoint(TRAIN, [Q(3, "club", "Who is the president?"), Q(1, "heroes", "How many heroes?")])


def test_same_id_on_the_same_database_is_refused():
    with pytest.raises(UserError) as err:
        check_disjoint(TRAIN, [Q(2, "club", "A reworded question")])
    assert "club#2" in str(err.value) and "1 of 2" in str(err.value)


def test_same_text_under_another_id_is_refused():
    with pytest.raises(UserError, match="How many members"):
        check_disjoint(TRAIN, [Q(99, "club", "  how many   MEMBERS are there? ")])


def test_many_overlaps_are_summarised():
    many = [Q(i, "db", f"question {i}") for i in range(20)]
    with pytest.raises(UserError, match="and 15 more"):
        check_disjoint(many, many)


def test_exclude_removes_only_the_evaluated():
    evaluated = [Q(1, "club", "x")]
    assert exclude(TRAIN, evaluated) == [TRAIN[1]]
    assert len(overlap(TRAIN, evaluated)) == 1
