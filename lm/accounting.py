"""Cost accounting: one record per LM call, aggregated per question and per run.

A record says which loop (``lm_scope``) and which predictor (its signature's name) made the call,
its prompt and completion tokens, its seconds, and whether the DSPy cache or a cassette served it.
Records go to every ``CostMeter`` open around the call.

Scopes and meters ride in DSPy's own per-thread settings (``dspy.context``), so they follow the LM
configuration wherever DSPy carries it, including the worker threads of ``dspy.Parallel`` and
``dspy.Evaluate``. A thread started by other means sees neither the LM nor the meters of its
parent: open the meter (and the LM context) inside the worker, e.g. one meter per question.

    with CostMeter() as run:
        for q in questions:
            with CostMeter() as per_question, lm_scope("synthesis.generator"):
                program(question=q)
            print(per_question.summary())
        print(run.summary())
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Iterable, Iterator

import dspy

from reflect_sql.lm.cost_ledger import FirstCost

_SCOPE_KEY = "reflect_sql_lm_scope"
_METERS_KEY = "reflect_sql_meters"


@dataclass(frozen=True)
class CallRecord:
    model: str
    role: str | None
    scope: str | None
    predictor: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int  # prompt tokens the engine's own prefix (KV) cache did not recompute
    seconds: float
    cache_hit: bool  # served by DSPy's response cache: no model call, no tokens billed
    replayed: bool  # served by a cassette: tokens and seconds are those recorded
    failure: str | None = None  # LMFailure kind when the call raised ("error" for anything else)
    # A cache hit: what the call cost when first computed (``lm.cost_ledger``); None when unknown.
    first_cost: FirstCost | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@contextmanager
def lm_scope(label: str) -> Iterator[None]:
    """Label every LM call made inside the block (innermost label wins), e.g. ``"synthesis.judge"``."""
    with dspy.context(**{_SCOPE_KEY: label}):
        yield


def current_scope() -> str | None:
    return dspy.settings.get(_SCOPE_KEY)


def current_predictor() -> str | None:
    """The innermost ``dspy.Predict`` on the call stack, named by its signature class.

    Signatures built from strings, and those ChainOfThought extends, are all named
    ``StringSignature``; those predictors are named by their attribute path in the calling
    program instead (``"judge"`` for ``self.judge = dspy.ChainOfThought(...)``).
    """
    modules = dspy.settings.get("caller_modules") or []
    predict = next((m for m in reversed(modules) if getattr(m, "signature", None) is not None), None)
    if predict is None:
        return None
    name = getattr(predict.signature, "__name__", type(predict).__name__)
    if name != "StringSignature" or modules[0] is predict:
        return name
    for path, candidate in modules[0].named_predictors():
        if candidate is predict:
            path = path.removesuffix(".predict")
            return name if path == "predict" else path
    return name


def _active_meters() -> tuple["CostMeter", ...]:
    return dspy.settings.get(_METERS_KEY) or ()


def publish(record: CallRecord) -> None:
    for meter in _active_meters():
        meter.add(record)


def note_adapter_fallback() -> None:
    for meter in _active_meters():
        meter.add_fallback()


def _totals(records: Iterable[CallRecord]) -> dict:
    out = {"lm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached_prompt_tokens": 0,
           "seconds": 0.0, "cache_hits": 0, "replays": 0, "failures": 0,
           # The same as if no response cache had been shared: cache hits at their first cost.
           "alone_prompt_tokens": 0, "alone_completion_tokens": 0, "alone_seconds": 0.0,
           "cache_hits_of_unknown_cost": 0}
    for r in records:
        out["lm_calls"] += 1
        out["prompt_tokens"] += r.prompt_tokens
        out["completion_tokens"] += r.completion_tokens
        out["cached_prompt_tokens"] += r.cached_prompt_tokens
        out["seconds"] += r.seconds
        out["cache_hits"] += int(r.cache_hit)
        out["replays"] += int(r.replayed)
        out["failures"] += int(r.failure is not None)
        first = r.first_cost or FirstCost(0, 0, 0.0)
        out["alone_prompt_tokens"] += r.prompt_tokens + first.prompt_tokens
        out["alone_completion_tokens"] += r.completion_tokens + first.completion_tokens
        out["alone_seconds"] += r.seconds + first.seconds
        out["cache_hits_of_unknown_cost"] += int(r.cache_hit and r.first_cost is None)
    out["seconds"] = round(out["seconds"], 3)
    out["alone_seconds"] = round(out["alone_seconds"], 3)
    return out


def summarize(records: Iterable[CallRecord], adapter_fallbacks: int = 0) -> dict:
    """``{"lm_calls", "prompt_tokens", "completion_tokens", "seconds", "cache_hits", ..., "by_scope"}``."""
    records = list(records)
    out = _totals(records)
    out["adapter_fallbacks"] = adapter_fallbacks
    groups: dict[str, list[CallRecord]] = {}
    for r in records:
        groups.setdefault(r.scope or "unscoped", []).append(r)
    out["by_scope"] = {scope: _totals(rs) for scope, rs in sorted(groups.items())}
    return out


class CostMeter:
    """Collects the records of LM calls made inside ``with meter:``; safe to share between threads."""

    def __init__(self, name: str | None = None):
        self.name = name
        self._records: list[CallRecord] = []
        self._fallbacks = 0
        self._lock = threading.Lock()
        # The same meter may be open in several threads at once (a run meter entered by each worker).
        self._open = threading.local()

    def __enter__(self) -> "CostMeter":
        ctx = dspy.context(**{_METERS_KEY: (*_active_meters(), self)})
        ctx.__enter__()
        stack = getattr(self._open, "stack", None)
        if stack is None:
            stack = self._open.stack = []
        stack.append(ctx)
        return self

    def __exit__(self, *exc) -> None:
        self._open.stack.pop().__exit__(*exc)

    def add(self, record: CallRecord) -> None:
        with self._lock:
            self._records.append(record)

    def add_fallback(self) -> None:
        with self._lock:
            self._fallbacks += 1

    @property
    def records(self) -> list[CallRecord]:
        with self._lock:
            return list(self._records)

    @property
    def adapter_fallbacks(self) -> int:
        with self._lock:
            return self._fallbacks

    def summary(self) -> dict:
        with self._lock:
            return summarize(self._records, self._fallbacks)
