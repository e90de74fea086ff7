"""Execution accuracy as the official BIRD and Spider evaluators compute it, plus recall and cost.

BIRD (``evaluation.py`` of the BIRD repository): the predicted and the gold query run on the
database; the prediction is correct when ``set(pred_rows) == set(gold_rows)`` (row order and
duplicates ignored); any error, or the pair not finishing within ``meta_time_out`` (30 s), is wrong.

Spider: the execution match of the official test-suite evaluator, ``exec_eval.eval_exec_match`` in
taoyds/test-suite-sql-eval (with ``parse.remove_distinct``), re-expressed here rule by rule; the
section "Spider" below gives each rule with the official function it comes from. In short: both
queries are post-processed (``> =`` -> ``>=`` ...), DISTINCT is removed from both unless
``keep_distinct``, rows are compared as bags, in order only when the gold text contains
``order by``, and the columns of the prediction may come in any order (``spider_result_eq``).

Both run here on a read-only sqlite3 connection, decoding text as the official scripts do (BIRD:
Python's default; Spider: UTF-8 with undecodable bytes dropped); the pipeline's engine (guard, row
cap) is deliberately not involved. Deliberate differences from the official scripts: a blank
prediction is wrong here, while they run the empty string, get no rows and count it right whenever
the gold result is empty too; a gold query that fails is wrong here (Spider's script stops on an
assertion); and a Spider pair gets the same time budget as a BIRD pair (its script's 60 s
``asyncio.wait_for`` cannot interrupt a running query, so it has none in effect).
"""
from __future__ import annotations

import math
import os
import re
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

# sqlglot (Spider's DISTINCT removal) and the settings (pydantic) are imported where they are used:
# ``reflect-sql score`` on BIRD needs neither, and importing them cost more CPU than all of its
# queries (it must run at least as fast as the official evaluator, bench/score_speed.py).

DEFAULT_TIMEOUT_S = 30.0  # the official BIRD meta_time_out
DIFFICULTIES = ("simple", "moderate", "challenging")

# How many SQLite VM steps run between two deadline checks: frequent enough to stop within a few
# milliseconds, rare enough to cost nothing measurable.
_PROGRESS_STEPS = 10_000
# Scoring caps values as the engines do by default; a run that raised its engine's cap raises it
# here too (``match``), so scoring accepts every value the engine returned. The same number as the
# default of ``Settings.max_value_bytes`` (a test holds them equal), written out so that scoring
# does not import pydantic.
_MAX_VALUE_BYTES = 64 * 2**20

# Authorizer actions a query may take without changing its connection for the next query: a
# connection that did anything else (PRAGMA, a TEMP object, BEGIN, a write attempt...) is closed
# after its question instead of serving the next one, as the official script's fresh connection
# per question would have forgotten it.
_STATELESS_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
                                sqlite3.SQLITE_RECURSIVE})


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


class _Watchdog:
    """One daemon thread that interrupts every query still running at its deadline.

    The progress handler stops a query between VM steps, but one step can take seconds
    (randomblob(1e8) per row); the watchdog interrupts such a query at the deadline too. It replaces
    a ``threading.Timer`` per query: starting a thread blocks until the scheduler runs it, which on
    a busy machine made scoring wait far longer than it computed. The thread sleeps until the
    earliest deadline and is woken only when a query with an earlier one arrives, so queries that
    finish in time cost a lock, not a wake-up.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[int, tuple[float, sqlite3.Connection]] = {}
        self._tokens = 0
        self._wake_at = math.inf
        self._thread: threading.Thread | None = None

    def watch(self, conn: sqlite3.Connection, deadline: float) -> int:
        with self._cond:
            self._tokens += 1
            self._due[self._tokens] = (deadline, conn)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="reflect-sql-score-watchdog", daemon=True)
                self._thread.start()
            elif deadline < self._wake_at:
                self._wake_at = deadline
                self._cond.notify()
            return self._tokens

    def unwatch(self, token: int) -> None:
        with self._cond:
            self._due.pop(token, None)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for token, (deadline, conn) in list(self._due.items()):
                    if deadline <= now:
                        del self._due[token]
                        try:
                            # A query that finished meanwhile is not harmed: SQLite clears the flag
                            # when the connection's next statement starts with none running.
                            conn.interrupt()
                        except sqlite3.ProgrammingError:  # closed meanwhile
                            pass
                self._wake_at = min((d for d, _ in self._due.values()), default=math.inf)
                self._cond.wait(None if self._wake_at == math.inf else min(self._wake_at - now, threading.TIMEOUT_MAX))


_WATCHDOG = _Watchdog()


def _new_watchdog_after_fork() -> None:
    # A forked child has no watchdog thread, and the parent's lock may have been held at the fork.
    global _WATCHDOG
    _WATCHDOG = _Watchdog()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_watchdog_after_fork)


def _decode_dropping_errors(raw: bytes) -> str:
    # The test-suite evaluator's text_factory (exec_eval.get_cursor_from_path): UTF-8, undecodable
    # bytes dropped. For valid UTF-8 it gives what the default decoding gives.
    return raw.decode(errors="ignore")


class _ReadOnly:
    """A read-only connection with its progress handler (reading ``deadline``) and, for reuse, an
    authorizer that only notes whether a query did anything that outlives it (``stateful``).
    ``fmt`` "spider" decodes text as the test-suite evaluator does; "bird" as Python does."""

    __slots__ = ("conn", "deadline", "stateful")

    def __init__(self, db_path: str | Path, max_value_bytes: int, track_state: bool = False, fmt: str = "bird") -> None:
        self.conn = connect_read_only(db_path, max_value_bytes)
        if fmt == "spider":
            self.conn.text_factory = _decode_dropping_errors
        self.deadline = math.inf
        self.stateful = False
        self.conn.set_progress_handler(self._over_time, _PROGRESS_STEPS)
        if track_state:
            self.conn.set_authorizer(self._authorize)

    def _over_time(self) -> int:
        return 1 if time.monotonic() > self.deadline else 0

    def _authorize(self, action: int, *_: Any) -> int:
        if action not in _STATELESS_ACTIONS:
            self.stateful = True
        return sqlite3.SQLITE_OK  # never refuse: the verdict must stay the official one

    def fetch(self, sql: str, deadline: float) -> list[tuple]:
        self.deadline = deadline
        token = _WATCHDOG.watch(self.conn, deadline)
        try:
            return self.conn.execute(sql).fetchall()
        except sqlite3.OperationalError as exc:
            if time.monotonic() > deadline and "interrupt" in str(exc).lower():
                raise _Timeout() from None
            raise
        finally:
            _WATCHDOG.unwatch(token)
            self.deadline = math.inf

    def close(self) -> None:
        self.conn.close()


def _no_prediction(pred_sql: str | None) -> Match | None:
    if pred_sql is None:
        return Match(False, "missing", "no prediction for this question")
    if not pred_sql.strip():
        return Match(False, "empty", "blank prediction")
    return None


def _fetch_side(ro: _ReadOnly, sql: str, deadline: float, side: str, late: str
                ) -> tuple[list[tuple] | None, Match | None]:
    """One side's rows, or the verdict that ends the pair (``side``: "pred" or "gold"; ``late``: what
    a timeout says)."""
    try:
        return ro.fetch(sql, deadline), None
    except _Timeout:
        return None, Match(False, f"{side}_timeout", late)
    except (sqlite3.Error, ValueError, OverflowError) as exc:
        # ValueError: several statements; OverflowError: an integer too large for Python's binding.
        return None, Match(False, f"{side}_error", f"{type(exc).__name__}: {exc}")


def _pair_on(ro: _ReadOnly, pred_sql: str, gold_sql: str, timeout_s: float
             ) -> tuple[Match | None, list[tuple] | None, list[tuple] | None]:
    """Run prediction then gold under one deadline, as the official ``func_timeout`` wraps both."""
    deadline = time.monotonic() + timeout_s
    pred_rows, failed = _fetch_side(ro, pred_sql, deadline, "pred", f"prediction ran longer than {timeout_s:g}s")
    if failed is not None:
        return failed, None, None
    gold_rows, failed = _fetch_side(ro, gold_sql, deadline, "gold", f"gold query ran past the {timeout_s:g}s budget")
    return failed, pred_rows, gold_rows


def _cannot_open(db_path: str | Path, exc: Exception) -> Match:
    # The file vanished or is not a database: this question, not the run.
    return Match(False, "gold_error", f"cannot open the database {db_path}: {exc}")


def _run_pair(
    pred_sql: str | None, gold_sql: str, db_path: str | Path, timeout_s: float, max_value_bytes: int = _MAX_VALUE_BYTES,
    fmt: str = "bird",
) -> tuple[Match | None, list[tuple] | None, list[tuple] | None]:
    """One pair on a connection of its own, closed afterwards."""
    early = _no_prediction(pred_sql)
    if early:
        return early, None, None
    try:
        # Never below the default: a lowered cap is the engine's business, and a gold query must
        # not fail for it.
        ro = _ReadOnly(db_path, max(max_value_bytes, _MAX_VALUE_BYTES), fmt=fmt)
    except sqlite3.Error as exc:
        return _cannot_open(db_path, exc), None, None
    try:
        return _pair_on(ro, pred_sql, gold_sql, timeout_s)
    finally:
        ro.close()


def _verdict(fmt: str, failed: Match | None, pred_rows: list[tuple] | None, gold_rows: list[tuple] | None,
             order_matters: bool = False) -> Match:
    if failed:
        return failed
    if fmt == "bird":
        ok = set(pred_rows) == set(gold_rows)
    else:
        ok = spider_result_eq(gold_rows, pred_rows, order_matters)
    return Match(ok, "correct" if ok else "wrong")


def bird_match(pred_sql: str | None, gold_sql: str, db_path: str | Path, timeout_s: float = DEFAULT_TIMEOUT_S,
               max_value_bytes: int = _MAX_VALUE_BYTES) -> Match:
    return _verdict("bird", *_run_pair(pred_sql, gold_sql, db_path, timeout_s, max_value_bytes))


def has_top_level_order_by(sql: str) -> bool:
    """True when the query's own result is ordered (an ORDER BY inside a subquery does not count).

    Not Spider's rule, which is textual (``spider_order_matters``)."""
    import sqlglot
    from sqlglot import exp

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


# --- Spider: the test-suite evaluator's execution match ----------------------------------------
#
# Source: taoyds/test-suite-sql-eval, ``exec_eval.py`` (eval_exec_match, postprocess, result_eq,
# quick_rej, unorder_row, get_constraint_permutation, multiset_eq, replace_cur_year, exec_on_db_)
# and ``parse.py`` (remove_distinct). Written here from those published rules; that code is
# neither copied nor a dependency. ``tests/experiments/spider_official.py`` is a plain
# re-implementation kept as a yardstick, and tests/experiments/test_spider_official.py checks that
# both agree verdict for verdict on the shared Spider dev set.
#
# 1. postprocess (exec_eval.postprocess), on both queries: "> =", "< =", "! =" lose their inner
#    space. Textual, as the official one (it repairs tokenisation artefacts of generated SQL).
# 2. DISTINCT removal (parse.remove_distinct), on both queries unless keep_distinct. The official
#    code lexes the text with sqlparse, keeps the first statement only and drops every token that
#    reads "distinct". Here sqlglot parses the query (SQLite dialect) and the AST loses the
#    DISTINCT of each SELECT and each aggregate (COUNT(DISTINCT x) -> COUNT(x)); the query is
#    then written back by sqlglot. UNION/INTERSECT/EXCEPT keep their own set semantics (they carry
#    no DISTINCT token either). Differences, chosen: ``a IS [NOT] DISTINCT FROM b`` is a comparison,
#    kept here, while the official token cut leaves "IS NOT  FROM", a syntax error, so wrong there.
#    Where sqlglot cannot read the query (or for DISTINCT ON, or a multi-argument aggregate), the
#    DISTINCT keyword tokens are cut out of the text as the official code does. The first-statement
#    cut is kept (a text with no DISTINCT is otherwise left byte for byte): "SELECT 1; SELECT 2"
#    runs as "SELECT 1;" by default, and fails as two statements with keep_distinct.
# 3. Order (eval_exec_match): rows are compared in order when the gold text, lower-cased, contains
#    "order by" -- textually, so an ORDER BY inside a subquery or a string counts too, and
#    "ORDER\nBY" does not. Otherwise bag semantics (multisets of rows).
# 4. Execution (exec_on_db_, get_cursor_from_path): ``YEAR(CURDATE())`` becomes 2020 in both
#    queries; text is UTF-8 with undecodable bytes dropped; an error is wrong.
# 5. Result equality (result_eq, gold first): two empty results are equal; different row counts,
#    then different column counts, are not; then the quick rejection (quick_rej): each row is
#    turned into the tuple of its values sorted by ``str(v) + str(type(v))`` and these are compared
#    as lists when order matters, as sets otherwise (note: sets, and type names in the key, so
#    (1, '1.5') and (1.0, '1.5') are told apart here); then a column permutation of the prediction
#    must make it equal to the gold: as lists when order matters, else as sets and as multisets.
#    The official code enumerates the permutations allowed by per-column value sets (all of them
#    up to three columns; from 20 random prediction rows beyond). Here the search keeps only
#    permutations that can still succeed, which cannot change the verdict: with order, every gold
#    column must equal its prediction column value for value, so a permutation exists iff the two
#    results hold the same bag of column vectors; without order, a gold column may only take a
#    prediction column with the same bag of values, the bag of partial rows must agree after each
#    column assigned, and prediction columns equal value for value are tried once.
# Not implemented: plug_value (parse.get_all_preds_for_execution). Its verdicts rest on sqlparse's
# lexer and ad-hoc regular expressions (integers not after "t"/"T", keyword case folding, the
# T1.-alias heuristics) and it runs |gold values|^slots variants; matching it verdict for verdict
# means porting that code line by line, which this module does not do. Also not done: running
# on every .sqlite file of the database's folder (the distilled test-suite databases); here only
# the question's own database file is used.

_SPIDER_POSTPROCESS = (("> =", ">="), ("< =", "<="), ("! =", "!="))
_CUR_YEAR = re.compile(r"YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*", re.IGNORECASE)
SPIDER_DIALECT = "sqlite"


def spider_postprocess(sql: str) -> str:
    for spaced, joined in _SPIDER_POSTPROCESS:
        sql = sql.replace(spaced, joined)
    return sql


def _tokens(sql: str, dialect: str) -> list | None:
    import sqlglot

    try:
        return sqlglot.tokenize(sql, read=dialect)
    except Exception:  # noqa: BLE001 - an unreadable text is left to the database to refuse
        return None


def spider_first_statement(sql: str, dialect: str = SPIDER_DIALECT) -> str:
    """The text up to and including its first statement's ``;`` (the official ``parse(s)[0]``)."""
    if ";" not in sql:
        return sql
    from sqlglot.tokens import TokenType

    for token in _tokens(sql, dialect) or ():
        if token.token_type == TokenType.SEMICOLON:
            return sql[: token.end + 1]
    return sql


def _cut_distinct_tokens(sql: str, dialect: str) -> str:
    from sqlglot.tokens import TokenType

    tokens = _tokens(sql, dialect)
    if tokens is None:
        return sql
    out, at = [], 0
    for token in tokens:
        if token.token_type == TokenType.DISTINCT:
            out.append(sql[at:token.start])
            at = token.end + 1
    out.append(sql[at:])
    return "".join(out)


def remove_distinct(sql: str, dialect: str = SPIDER_DIALECT) -> str:
    """``sql`` without the DISTINCT of its SELECTs and aggregates, rewritten from its sqlglot AST
    (rule 2 above); unchanged, byte for byte, when it has none."""
    if "distinct" not in sql.lower():
        return sql
    import sqlglot
    from sqlglot import exp

    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
    except Exception:  # noqa: BLE001 - sqlglot cannot read it: the official token cut
        return _cut_distinct_tokens(sql, dialect)
    if len(trees) != 1:
        return _cut_distinct_tokens(sql, dialect)
    tree = trees[0]
    changed = False
    for node in list(tree.find_all(exp.Distinct)):
        if node.args.get("on") is not None:
            return _cut_distinct_tokens(sql, dialect)
        parent = node.parent
        if isinstance(parent, exp.Select) and node.arg_key == "distinct":
            parent.set("distinct", None)
        elif len(node.expressions) == 1:
            node.replace(node.expressions[0])
        else:
            return _cut_distinct_tokens(sql, dialect)
        changed = True
    if not changed:  # "distinct" only inside a string, a name or a comparison
        return sql
    try:
        return tree.sql(dialect=dialect)
    except Exception:  # noqa: BLE001
        return _cut_distinct_tokens(sql, dialect)


def spider_order_matters(gold_sql: str) -> bool:
    """Rule 3: the official test is textual, on the gold after rules 1 and 2."""
    return "order by" in gold_sql.lower()


@lru_cache(maxsize=4096)
def _spider_query(sql: str, keep_distinct: bool) -> tuple[str, bool]:
    text = spider_postprocess(sql)
    if not keep_distinct:
        text = spider_first_statement(text)
    # Rule 3 looks at this text: removing DISTINCT tokens neither makes nor breaks "order by".
    order_matters = spider_order_matters(text)
    if not keep_distinct:
        text = remove_distinct(text)
    return _CUR_YEAR.sub("2020", text), order_matters


def spider_queries(pred_sql: str, gold_sql: str, keep_distinct: bool = False) -> tuple[str, str, bool]:
    """What the test-suite evaluator executes for this pair, and whether row order matters."""
    pred_run, _ = _spider_query(pred_sql, keep_distinct)
    gold_run, order_matters = _spider_query(gold_sql, keep_distinct)
    return pred_run, gold_run, order_matters


def _sort_key(value: Any) -> str:
    return str(value) + str(type(value))


def _unordered_rows(rows: list[tuple]) -> list[tuple]:
    return [tuple(sorted(row, key=_sort_key)) for row in rows]


def spider_result_eq(gold_rows: list[tuple], pred_rows: list[tuple], order_matters: bool) -> bool:
    """Rule 5: the official ``result_eq(gold, pred, order_matters)`` verdict."""
    if not gold_rows and not pred_rows:
        return True
    if len(gold_rows) != len(pred_rows):
        return False
    width = len(gold_rows[0])
    if len(pred_rows[0]) != width:
        return False
    gold_unordered, pred_unordered = _unordered_rows(gold_rows), _unordered_rows(pred_rows)
    if order_matters:
        if gold_unordered != pred_unordered:
            return False
    elif set(gold_unordered) != set(pred_unordered):
        return False
    if width == 1:
        return gold_rows == pred_rows if order_matters else Counter(gold_rows) == Counter(pred_rows)
    gold_cols, pred_cols = list(zip(*gold_rows)), list(zip(*pred_rows))
    if order_matters:
        return Counter(gold_cols) == Counter(pred_cols)
    return _bag_permutation_exists(gold_rows, pred_rows, gold_cols, pred_cols)


def _bag_permutation_exists(gold_rows: list[tuple], pred_rows: list[tuple], gold_cols: list[tuple],
                            pred_cols: list[tuple]) -> bool:
    """Is there a column permutation under which the two results are equal bags of rows?"""
    width = len(gold_cols)
    pred_bags = [Counter(col) for col in pred_cols]
    candidates = []
    for col in gold_cols:
        bag = Counter(col)
        fits = [j for j in range(width) if pred_bags[j] == bag]
        if not fits:
            return False
        candidates.append(fits)
    gold_prefix_bags: list[Counter] = []
    prefixes: list[tuple] = [()] * len(gold_rows)
    for i in range(width):
        prefixes = [p + (row[i],) for p, row in zip(prefixes, gold_rows)]
        gold_prefix_bags.append(Counter(prefixes))
    used = [False] * width

    def extend(i: int, pred_prefixes: list[tuple]) -> bool:
        if i == width:
            return True
        tried: set[tuple] = set()
        for j in candidates[i]:
            if used[j] or pred_cols[j] in tried:
                continue
            tried.add(pred_cols[j])
            longer = [p + (row[j],) for p, row in zip(pred_prefixes, pred_rows)]
            if i and Counter(longer) != gold_prefix_bags[i]:
                continue
            used[j] = True
            if extend(i + 1, longer):
                return True
            used[j] = False
        return False

    return extend(0, [()] * len(pred_rows))


def spider_match(pred_sql: str | None, gold_sql: str, db_path: str | Path, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_value_bytes: int = _MAX_VALUE_BYTES, keep_distinct: bool = False) -> Match:
    """The test-suite evaluator's verdict for one pair (see the section "Spider" above)."""
    if pred_sql is None or not pred_sql.strip():
        return _no_prediction(pred_sql)
    pred_run, gold_run, order_matters = spider_queries(pred_sql, gold_sql, keep_distinct)
    return _verdict("spider", *_run_pair(pred_run, gold_run, db_path, timeout_s, max_value_bytes, fmt="spider"),
                    order_matters)


def match(fmt: str, pred_sql: str | None, gold_sql: str, db_path: str | Path, timeout_s: float = DEFAULT_TIMEOUT_S,
          max_value_bytes: int = _MAX_VALUE_BYTES, keep_distinct: bool = False) -> Match:
    """``max_value_bytes``: the run's engine cap; scoring accepts every value the engine did.
    ``keep_distinct``: Spider only, the official option of that name."""
    if fmt == "bird":
        return bird_match(pred_sql, gold_sql, db_path, timeout_s, max_value_bytes)
    return spider_match(pred_sql, gold_sql, db_path, timeout_s, max_value_bytes, keep_distinct)


class Scorer:
    """``match`` for many questions in a row (``reflect-sql score``), with the same verdicts.

    Instead of a connection per question, each thread keeps one read-only connection per database
    and reuses it, so the database is opened once and its page cache stays warm. A connection goes
    back for reuse only when its pair finished in time and neither query did anything that could
    outlive it (the authorizer watches: PRAGMA, TEMP objects, transactions, write attempts); any
    other is closed, so every question sees the fresh connection the official script gives it.
    ``keep_distinct``: Spider only, the official option of that name. Use as a context manager,
    or call ``close``.
    """

    def __init__(self, fmt: str, timeout_s: float = DEFAULT_TIMEOUT_S, max_value_bytes: int = _MAX_VALUE_BYTES,
                 keep_distinct: bool = False) -> None:
        self.fmt = fmt
        self.keep_distinct = keep_distinct
        self.timeout_s = timeout_s
        self.max_value_bytes = max(max_value_bytes, _MAX_VALUE_BYTES)  # never below the default (see _run_pair)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[_ReadOnly] = set()

    def match(self, pred_sql: str | None, gold_sql: str, db_path: str | Path) -> Match:
        early = _no_prediction(pred_sql)
        if early:
            return early
        order_matters = False
        if self.fmt == "spider":
            pred_sql, gold_sql, order_matters = spider_queries(pred_sql, gold_sql, self.keep_distinct)
        idle: dict[str, _ReadOnly] = self._local.__dict__.setdefault("idle", {})
        key = str(db_path)
        ro = idle.pop(key, None)
        if ro is None:
            try:
                ro = _ReadOnly(db_path, self.max_value_bytes, track_state=True, fmt=self.fmt)
            except sqlite3.Error as exc:
                return _cannot_open(db_path, exc)
            with self._lock:
                self._open.add(ro)
        failed, pred_rows, gold_rows = _pair_on(ro, pred_sql, gold_sql, self.timeout_s)
        if ro.stateful or ro.conn.in_transaction or (failed is not None and failed.status.endswith("timeout")):
            self._discard(ro)
        else:
            idle[key] = ro
        return _verdict(self.fmt, failed, pred_rows, gold_rows, order_matters)

    def _discard(self, ro: _ReadOnly) -> None:
        with self._lock:
            self._open.discard(ro)
        ro.close()

    def close(self) -> None:
        with self._lock:
            still_open, self._open = self._open, set()
        for ro in still_open:
            ro.close()

    def __enter__(self) -> "Scorer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


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
    # Lazy: scoring alone never gets here, and must not load the db room (sqlglot, pydantic).
    from reflect_sql.db.identifiers import quote_identifier

    conn = connect_read_only(db_path)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%'")]
        return {t: {row[1]: row[2] or "TEXT" for row in conn.execute(f"PRAGMA table_info({quote_identifier(t, 'sqlite')})")}
                for t in tables}
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
# The ``alone_`` keys count the calls a shared response cache served at what they first cost.
COST_KEYS = ("lm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "seconds", "lm_seconds",
             "cache_hits", "alone_prompt_tokens", "alone_completion_tokens", "alone_lm_seconds", "alone_seconds",
             "cache_hits_of_unknown_cost")


def aggregate_cost(costs: Iterable[Mapping[str, Any] | None]) -> dict[str, Any]:
    """Totals and per-question means of LM calls, tokens and wall seconds."""
    totals = {k: 0.0 for k in COST_KEYS}
    n = 0
    for cost in costs:
        n += 1
        cost = cost or {}
        for k in COST_KEYS:
            # A record written before the ledger existed shared no cache it could account for.
            value = cost.get(k, cost.get(k.removeprefix("alone_")))
            totals[k] += float(value or 0)
    out: dict[str, Any] = {"questions": n}
    for k in COST_KEYS:
        out[k] = round(totals[k], 3) if k.endswith("seconds") else int(totals[k])
    out["per_question"] = {k: (round(totals[k] / n, 3) if n else None) for k in COST_KEYS}
    return out
