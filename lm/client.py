"""``ReflectLM``: a ``dspy.LM`` that accounts for every call and can record or replay it.

It runs DSPy 3.4's own call path (``prepare`` -> ``execute`` -> ``finalize`` from
``dspy.clients.execution``, exactly what ``BaseLM.__call__`` does) and adds two steps around
``execute``, which is the one place that knows whether the DSPy cache served the call and what
the engine reported as usage:
  - replay: the response comes from the cassette and ``execute`` never runs, so no engine is
    called and the embedded model is not even loaded;
  - accounting (``CallRecord`` to the open ``CostMeter``s) and recording (to the cassette).
Everything else (engines, DSPy cache, retries with backoff, history, callbacks) is DSPy's.
"""
from __future__ import annotations

import asyncio
import time

import dspy
from dspy._vendor.lm15.serde import request_to_dict
from dspy.clients.call_result import CallResult
from dspy.clients.execution import aexecute, execute, finalize, prepare
from dspy.utils.callback import with_callbacks

from reflect_sql.lm.accounting import CallRecord, current_predictor, current_scope, publish
from reflect_sql.lm.cassette import Cassette, normalise, request_hash
from reflect_sql.lm.cost_ledger import CostLedger, FirstCost
from reflect_sql.lm.failures import LMFailure, classify


def _payload(call) -> dict:
    if call.request is not None:
        payload = {"request": request_to_dict(call.request)}
        # Samples of one prompt differ only by their rollout id: each must be its own recording.
        # Absent when unset, so the keys of every recording made before stay what they were.
        if call.kwargs.get("rollout_id") is not None:
            payload["rollout_id"] = call.kwargs["rollout_id"]
        return payload
    return dict(call.legacy)


def _int(value) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


class ReflectLM(dspy.LM):
    """dspy.LM plus per-call accounting, an optional cassette and an optional ledger of what cached
    responses first cost. ``role`` labels the records."""

    def __init__(self, model: str, *, role: str | None = None, cassette: Cassette | None = None,
                 ledger: CostLedger | None = None, **kwargs):
        super().__init__(model, **kwargs)
        self.role = role
        self.cassette = cassette
        self.ledger = ledger

    def _request_key(self, call) -> str | None:
        if self.cassette is None and self.ledger is None:
            return None
        return request_hash(_payload(call))

    def _record(self, *, usage: dict, seconds: float, cache_hit=False, replayed=False, failure=None,
                first_cost: FirstCost | None = None) -> None:
        details = usage.get("prompt_tokens_details") or {}
        publish(CallRecord(
            model=self.model,
            role=self.role,
            scope=current_scope(),
            predictor=current_predictor(),
            prompt_tokens=_int(usage.get("prompt_tokens")),
            completion_tokens=_int(usage.get("completion_tokens")),
            cached_prompt_tokens=_int(details.get("cached_tokens") if isinstance(details, dict) else 0),
            seconds=seconds,
            cache_hit=cache_hit,
            replayed=replayed,
            failure=failure,
            first_cost=first_cost,
        ))

    def _replay(self, key: str | None) -> CallResult | None:
        if self.cassette is None or not self.cassette.replaying:
            return None
        try:
            entry = self.cassette.get(key, self.model)
        except Exception as exc:
            self._record(usage={}, seconds=0.0, failure=getattr(exc, "kind", "miss"))
            raise
        seconds = float(entry.get("seconds") or 0.0)
        if "failure" in entry:
            failure = entry["failure"]
            self._record(usage={}, seconds=seconds, replayed=True, failure=failure["kind"])
            raise LMFailure(failure["kind"], failure["message"], model=self.model)
        result = CallResult.load(entry["result"])
        self._record(usage=entry.get("usage") or {}, seconds=seconds, replayed=True)
        return result

    def _finish(self, call, key, result: CallResult, seconds: float) -> None:
        usage = {} if result.cache_hit else dict(result.usage or {})
        first_cost = None
        if self.ledger is not None:
            if result.cache_hit:
                first_cost = self.ledger.get(key)
            else:
                self.ledger.put(key, FirstCost(_int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens")),
                                               round(seconds, 4)))
        self._record(usage=usage, seconds=seconds, cache_hit=result.cache_hit, first_cost=first_cost)
        if self.cassette is not None and not self.cassette.replaying:
            self.cassette.put(key, {
                "model": self.model,
                "request": normalise(_payload(call)),
                "result": result.dump(),
                "usage": usage,
                "seconds": round(seconds, 4),
            })

    def _fail(self, call, key, exc: BaseException, seconds: float) -> None:
        failure = classify(exc)
        self._record(usage={}, seconds=seconds, failure=failure.kind if failure else "error")
        # A replay must fail where the recorded run failed, but an answer recorded for the same
        # request (an earlier or concurrent success) is worth more than the failure.
        if failure is not None and self.cassette is not None and not self.cassette.replaying:
            if not self.cassette.path(key).exists():
                self.cassette.put(key, {
                    "model": self.model,
                    "request": normalise(_payload(call)),
                    "failure": {"kind": failure.kind, "message": failure.message},
                    "seconds": round(seconds, 4),
                })

    @with_callbacks
    def __call__(self, prompt=None, *, messages=None, **kwargs):
        call = prepare(self, prompt, messages, kwargs)
        key = self._request_key(call)
        result = self._replay(key)
        if result is None:
            started = time.perf_counter()
            try:
                result = execute(self, call)
            except Exception as exc:
                self._fail(call, key, exc, time.perf_counter() - started)
                raise
            self._finish(call, key, result, time.perf_counter() - started)
        return finalize(self, call, result)

    @with_callbacks
    async def acall(self, prompt=None, *, messages=None, **kwargs):
        call = await asyncio.to_thread(prepare, self, prompt, messages, kwargs, asynchronous=True)
        key = self._request_key(call)
        result = self._replay(key)
        if result is None:
            started = time.perf_counter()
            try:
                result = await aexecute(self, call)
            except Exception as exc:
                self._fail(call, key, exc, time.perf_counter() - started)
                raise
            self._finish(call, key, result, time.perf_counter() - started)
        return finalize(self, call, result)

    def dump_state(self):
        state = super().dump_state()
        if self.role is not None:
            state["role"] = self.role
        return state
