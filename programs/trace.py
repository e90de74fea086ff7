"""The trace: one record per loop iteration, with what went in, the scores, the decision taken,
the feedback or rewrite it produced, any failure, and the LM cost of that iteration."""
from __future__ import annotations

import json
import math
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator


def json_safe(value: Any) -> Any:
    """Database values and pydantic/enum outputs, made JSON-serialisable without losing meaning."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [json_safe(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if hasattr(value, "to_json"):  # our own result objects (retrieval contexts, query results)
        return json_safe(value.to_json())
    if hasattr(value, "model_dump"):
        return json_safe(value.model_dump())
    return str(value)


@dataclass
class TraceStep:
    loop: str  # "retrieval", "synthesis.generate", "synthesis.syntax", "synthesis.semantic", "entailment", ...
    round: int  # which pass through the loops (entailment sends the pipeline back to round + 1)
    iteration: int  # which iteration inside this loop, in this round
    inputs: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Any] = field(default_factory=dict)
    decision: str = ""
    feedback: str | None = None
    rewrite: dict[str, Any] | None = None
    failure: str | None = None
    retry: str | None = None  # why the LM was asked again for this step's reply (a self-contradicting judge)
    cost: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return json_safe(asdict(self))


class Trace:
    def __init__(self) -> None:
        self.steps: list[TraceStep] = []

    def add(self, step: TraceStep) -> TraceStep:
        self.steps.append(step)
        watcher = _watcher.get()
        if watcher is not None:
            watcher(step)
        return step

    def by_loop(self, loop: str) -> list[TraceStep]:
        return [s for s in self.steps if s.loop == loop]

    def to_json(self) -> list[dict[str, Any]]:
        out = [s.to_json() for s in self.steps]
        json.dumps(out)  # fail here, not in a caller's serialiser, if something slipped through
        return out


# Whoever watches a question's steps as they are added (the chat streams them). A context variable,
# so only the thread answering that question is watched.
_watcher: ContextVar[Callable[[TraceStep], None] | None] = ContextVar("trace_watcher", default=None)


@contextmanager
def watching(callback: Callable[[TraceStep], None]) -> Iterator[None]:
    """Call ``callback(step)`` for every step any Trace adds in this context, as it is added (its
    scores and decision are filled in afterwards, by the time the next step is added)."""
    token = _watcher.set(callback)
    try:
        yield
    finally:
        _watcher.reset(token)
