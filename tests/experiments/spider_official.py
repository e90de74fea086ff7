"""A plain re-implementation of the official Spider execution match, kept as a yardstick.

It follows the published ``exec_eval.eval_exec_match`` of taoyds/test-suite-sql-eval (with
``parse.remove_distinct``) as literally as a re-implementation can: sqlparse lexes the text for
DISTINCT removal, order matters when the gold text contains "order by", each query runs on a fresh
connection, and the column permutations are enumerated from per-column value sets narrowed by 20
randomly drawn prediction rows. ``plug_value`` and the several-databases-per-folder loop are left
out: the scorer under test implements neither. It is deliberately slow and simple; the scorer
(``reflect_sql.experiments.metrics``) must give the same verdict on every pair.
"""
from __future__ import annotations

import itertools
import random
import re
import sqlite3
from collections import defaultdict
from pathlib import Path

import sqlparse


def postprocess(sql: str) -> str:
    return sql.replace("> =", ">=").replace("< =", "<=").replace("! =", "!=")


def remove_distinct(sql: str) -> str:
    # sqlparse's first statement, every token that reads "distinct" left out, the rest as written.
    first = sqlparse.parse(sql)[0]
    return "".join(tok.value for tok in first.flatten() if tok.value.lower() != "distinct")


def run(db_path: str | Path, sql: str) -> tuple[bool, object]:
    sql = re.sub(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", "2020", sql, flags=re.IGNORECASE)
    conn = sqlite3.connect(Path(db_path).resolve().as_uri() + "?mode=ro", uri=True)
    conn.text_factory = lambda raw: raw.decode(errors="ignore")
    try:
        return True, conn.execute(sql).fetchall()
    except Exception as exc:  # noqa: BLE001 - any failure is a wrong prediction
        return False, exc
    finally:
        conn.close()


def _row_as_bag(row: tuple) -> tuple:
    return tuple(sorted(row, key=lambda v: str(v) + str(type(v))))


def _quick_accept(gold: list[tuple], pred: list[tuple], order_matters: bool) -> bool:
    g = [_row_as_bag(r) for r in gold]
    p = [_row_as_bag(r) for r in pred]
    return g == p if order_matters else set(g) == set(p)


def _same_bag(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    counts: dict = defaultdict(int)
    for x in a:
        counts[x] += 1
    for x in b:
        counts[x] -= 1
        if counts[x] < 0:
            return False
    return True


def _permutations(gold_col_sets: list[set], pred: list[tuple], rng: random.Random):
    n = len(pred[0])
    allowed = [set(range(n)) for _ in range(n)]
    if n > 3:
        for _ in range(20):
            row = rng.choice(pred)
            for g in range(n):
                for p in list(allowed[g]):
                    if row[p] not in gold_col_sets[g]:
                        allowed[g].discard(p)
    return itertools.product(*allowed)


def result_eq(gold: list[tuple], pred: list[tuple], order_matters: bool, rng: random.Random | None = None) -> bool:
    if not gold and not pred:
        return True
    if len(gold) != len(pred):
        return False
    n = len(gold[0])
    if len(pred[0]) != n:
        return False
    if not _quick_accept(gold, pred, order_matters):
        return False
    gold_col_sets = [{row[i] for row in gold} for i in range(n)]
    for perm in _permutations(gold_col_sets, pred, rng or random.Random(0)):
        if len(set(perm)) != len(perm):
            continue
        moved = pred if n == 1 else [tuple(row[i] for i in perm) for row in pred]
        if order_matters:
            if gold == moved:
                return True
        elif set(gold) == set(moved) and _same_bag(gold, moved):
            return True
    return False


def eval_exec_match(db_path: str | Path, pred: str, gold: str, keep_distinct: bool = False) -> bool:
    pred, gold = postprocess(pred), postprocess(gold)
    if not keep_distinct:
        pred, gold = remove_distinct(pred), remove_distinct(gold)
    order_matters = "order by" in gold.lower()
    ok, gold_rows = run(db_path, gold)
    assert ok, f"gold query fails: {gold!r}: {gold_rows}"
    ok, pred_rows = run(db_path, pred)
    return ok and result_eq(gold_rows, pred_rows, order_matters)
