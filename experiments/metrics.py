"""Execution accuracy as the official BIRD and Spider evaluators compute it, plus recall and cost.

BIRD (``evaluation.py`` of the BIRD repository): the predicted and the gold query run on the
database; the prediction is correct when ``set(pred_rows) == set(gold_rows)`` (row order and
duplicates ignored); any error, or the pair not finishing within ``meta_time_out`` (30 s), is wrong.

Spider execution match (the test-suite evaluator's rule): rows compared as multisets, and as
ordered lists only when the gold query has a top-level ORDER BY.

Both run here on a read-only sqlite3 connection with Python's default text decoding, exactly as the
official scripts fetch rows; the pipeline's engine (guard, row cap) is deliberately not involved.
One deliberate difference: a blank prediction is wrong here, while the official scripts run the
empty string, get no rows and count it right whenever the gold result is empty too.
"""
from __future__ import annotations

import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import sqlglot
from sqlglot import exp

from reflect_sql.settings import Settings

DEFAULT_TIMEOUT_S = 30.0  # the official BIRD meta_time_out
DIFFICULTIES = ("simple", "moderate", "challenging")

# How many SQLite VM steps run between two deadline checks: frequent enough to stop within a few
# milliseconds, rare enough to cost nothing measurable.
_PROGRESS_STEPS = 10_000
# Scoring caps values as the engines do by default; a run that raised its engine's cap raises it
# here too (``match``), so scoring accepts every value the engine returned.
_MAX_VALUE_BYTES = Settings.model_fields["max_value_bytes"].default


class _Timeout(Exception):
    pass


@dataclass(frozen=True)
class Match:
    correct: bool
    #: correct | wrong | empty | pred_error | pred_timeout | gold_error | gold_timeout | missing
    status: str
    detail: str = ""


def connect_read_only(db_path: str | Path, max_value_bytes: int = _MAX_VALUE_BYTES) -> sqlite3.Connection:
    uri = Path(db_path).resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    # mode=ro covers the main database only: a predicted ATTACH or VACUUM INTO would still create
    # files. No SELECT needs an attached database, so none may be attached.
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    # A predicted randomblob(1e9) would allocate a gigabyte per row before any timeout looks.
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, max_value_bytes)
    return conn


def _fetch(conn: sqlite3.Connection, sql: str, deadline: float) -> list[tuple]:
    def over_time() -> int:
        return 1 if time.monotonic() > deadline else 0

    conn.set_progress_handler(over_time, _PROGRESS_STEPS)
    # The handler runs between VM steps only, and one step can take seconds (randomblob(1e8) per
    # row): a timer interrupts such a query at the deadline too.
    timer = threading.Timer(max(0.0, deadline - time.monotonic()), conn.interrupt)
    timer.daemon = True
    timer.start()
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError as exc:
        if time.monotonic() > deadline and "interrupt" in str(exc).lower():
            raise _Timeout() from None
        raise
    finally:
        timer.cancel()
        conn.set_progress_handler(None, 0)


def _run_pair(
    pred_sql: str | None, gold_sql: str, db_path: str | Path, timeout_s: float, max_value_bytes: int = _MAX_VALUE_BYTES
) -> tuple[Match | None, list[tuple] | None, list[tuple] | None]:
    """Run prediction then gold under one deadline, as the official ``func_timeout`` wraps both."""
    if pred_sql is None:
        return Match(False, "missing", "no prediction for this question"), None, None
    if not pred_sql.strip():
        return Match(False, "empty", "blank prediction"), None, None
    deadline = time.monotonic() + timeout_s
    try:
        # Never below the default: a lowered cap is the engine's business, and a gold query must
        # not fail for it.
        conn = connect_read_only(db_path, max(max_value_bytes, _MAX_VALUE_BYTES))
    except sqlite3.Error as exc:  # the file vanished or is not a database: this question, not the run
        return Match(False, "gold_error", f"cannot open the database {db_path}: {exc}"), None, None
    try:
        try:
            pred_rows = _fetch(conn, pred_sql, deadline)
        except _Timeout:
            return Match(False, "pred_timeout", f"prediction ran longer than {timeout_s:g}s"), None, None
        except (sqlite3.Error, ValueError, OverflowError) as exc:
            # ValueError: several statements; OverflowError: an integer too large for Python's binding.
            return Match(False, "pred_error", f"{type(exc).__name__}: {exc}"), None, None
        try:
            gold_rows = _fetch(conn, gold_sql, deadline)
        except _Timeout:
            return Match(False, "gold_timeout", f"gold query ran past the {timeout_s:g}s budget"), pred_rows, None
        except (sqlite3.Error, ValueError, OverflowError) as exc:
            return Match(False, "gold_error", f"{type(exc).__name__}: {exc}"), pred_rows, None
    finally:
        conn.close()
    return None, pred_rows, gold_rows


def bird_match(pred_sql: str | None, gold_sql: str, db_path: str | Path, timeout_s: float = DEFAULT_TIMEOUT_S,
               max_value_bytes: int = _MAX_VALUE_BYTES) -> Match:
    failed, pred_rows, gold_rows = _run_pair(pred_sql, gold_sql, db_path, timeout_s, max_value_bytes)
    if failed:
        return failed
    ok = set(pred_rows) == set(gold_rows)
    return Match(ok, "correct" if ok else "wrong")


def has_top_level_order_by(sql: str) -> bool:
    """True when the query's own result is ordered (an ORDER BY inside a subquery does not count)."""
    try:
        trees = [t for t in sqlglot.parse(sql, read="sqlite") if t is not None]
    except sqlglot.errors.SqlglotError:
        # The test-suite evaluator's own rule, for SQL sqlglot cannot read.
        return "order by" in sql.lower()
    if not trees:
        return False
    tree = trees[-1]
    while isinstance(tree, exp.Subquery):
        tree = tree.this
    return tree.args.get("order") is not None


def spider_match(pred_sql: str | None, gold_sql: str, db_path: str | Path, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_value_bytes: int = _MAX_VALUE_BYTES) -> Match:
    failed, pred_rows, gold_rows = _run_pair(pred_sql, gold_sql, db_path, timeout_s, max_value_bytes)
    if failed:
        return failed
    if has_top_level_order_by(gold_sql):
        ok = pred_rows == gold_rows
    else:
        ok = Counter(pred_rows) == Counter(gold_rows)
    return Match(ok, "correct" if ok else "wrong")


def match(fmt: str, pred_sql: str | None, gold_sql: str, db_path: str | Path, timeout_s: float = DEFAULT_TIMEOUT_S,
          max_value_bytes: int = _MAX_VALUE_BYTES) -> Match:
    """``max_value_bytes``: the run's engine cap; scoring accepts every value the engine did."""
    return (bird_match if fmt == "bird" else spider_match)(pred_sql, gold_sql, db_path, timeout_s, max_value_bytes)


def _percent(correct: int, total: int) -> float | None:
    return round(100.0 * correct / total, 2) if total else None


def accuracy_table(outcomes: Iterable[tuple[str | None, bool]], by_difficulty: bool = True) -> dict[str, Any]:
    """``(difficulty, correct)`` pairs -> ``{"simple": %, ..., "overall": %, "counts": {...}}``.

    Accuracies are percentages (0-100, two decimals) as the official BIRD evaluator prints them;
    a difficulty with no question is ``None``. Spider has no difficulty: overall only.
    """
    totals: Counter = Counter()
    hits: Counter = Counter()
    for difficulty, correct in outcomes:
        for bucket in ((difficulty, "overall") if by_difficulty and difficulty else ("overall",)):
            totals[bucket] += 1
            hits[bucket] += bool(correct)
    table: dict[str, Any] = {}
    names = (*DIFFICULTIES, "overall") if by_difficulty else ("overall",)
    for name in names:
        table[name] = _percent(hits[name], totals[name])
    table["counts"] = {name: totals[name] for name in names}
    return table


# --- Retrieval recall -------------------------------------------------------------------------


@lru_cache(maxsize=64)
def sqlite_mapping(db_path: str) -> dict[str, dict[str, str]]:
    """``{table: {column: type}}`` of a SQLite file, read-only, for resolving gold queries."""
    conn = connect_read_only(db_path)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'")]
        return {t: {row[1]: row[2] or "TEXT" for row in conn.execute('PRAGMA table_info("' + t.replace('"', '""') + '")')} for t in tables}
    finally:
        conn.close()


def gold_tables_and_columns(sql: str, schema: Any, dialect: str = "sqlite") -> tuple[set[str], set[str]]:
    """Tables and ``table.column`` names (lower case) that a gold query reads.

    ``schema`` is a ``reflect_sql.db.schema.Schema`` or a ``{table: {column: type}}`` mapping. The
    resolution is the KB room's (``kb.usage.sql_usage``), so this recall and the KB's recall bench
    agree; a query sqlglot cannot resolve yields empty sets and so no recall value.
    """
    from reflect_sql.kb.usage import UsageError, sql_usage

    mapping = schema.sqlglot_mapping() if hasattr(schema, "sqlglot_mapping") else dict(schema)
    try:
        tables, columns = sql_usage(sql, mapping, dialect)
    except UsageError:
        return set(), set()
    return {t.lower() for t in tables}, {c.lower() for c in columns}


def _normalise_columns(retrieved: Iterable[Any]) -> set[str]:
    out = set()
    for item in retrieved or []:
        if isinstance(item, str):
            out.add(item.lower())
        elif isinstance(item, Mapping):
            out.add(f"{item.get('table', '')}.{item.get('column', item.get('name', ''))}".lower())
        else:
            table, column = item
            out.add(f"{table}.{column}".lower())
    return out


def retrieval_recall(gold_tables: set[str], gold_columns: set[str], retrieved: Mapping[str, Any] | None) -> dict[str, float | None]:
    """Share of the gold tables and columns that the retrieval step handed to the generator."""
    retrieved = retrieved or {}
    got_tables = {str(t).lower() for t in retrieved.get("tables") or []}
    got_columns = _normalise_columns(retrieved.get("columns") or [])
    return {
        "table_recall": len(gold_tables & got_tables) / len(gold_tables) if gold_tables else None,
        "column_recall": len(gold_columns & got_columns) / len(gold_columns) if gold_columns else None,
    }


def mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


# --- Cost -----------------------------------------------------------------------------------

# ``seconds`` is the question's wall time in the pipeline; ``lm_seconds`` the part spent in LM calls.
COST_KEYS = ("lm_calls", "prompt_tokens", "completion_tokens", "seconds", "lm_seconds")


def aggregate_cost(costs: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Totals and per-question means of LM calls, tokens and wall seconds."""
    totals = {k: 0.0 for k in COST_KEYS}
    n = 0
    for cost in costs:
        n += 1
        for k in COST_KEYS:
            totals[k] += float((cost or {}).get(k) or 0)
    out: dict[str, Any] = {"questions": n}
    for k in COST_KEYS:
        out[k] = round(totals[k], 3) if k.endswith("seconds") else int(totals[k])
    out["per_question"] = {k: (round(totals[k] / n, 3) if n else None) for k in COST_KEYS}
    return out
