"""LM errors reach the caller as a typed LMFailure; bugs still propagate."""
from __future__ import annotations

import dspy
import pytest
from dspy.lm15 import Message, Response, TextPart, Usage
from dspy.lm15 import RateLimitError as ProviderRateLimit
from dspy.lm15 import TimeoutError as ProviderTimeout
from dspy.utils.exceptions import AdapterParseError, LMRateLimitError, LMTimeoutError

from reflect_sql.lm.accounting import CostMeter
from reflect_sql.lm.client import ReflectLM
from reflect_sql.lm.failures import LMFailure, classify, lm_failures
from reflect_sql.lm.scripted import ScriptedLM


class Pick(dspy.Signature):
    """Pick."""

    text: str = dspy.InputField()
    label: str = dspy.OutputField()


def _parse_error(response):
    return AdapterParseError("ChatAdapter", Pick, response, "no fields")


@pytest.mark.parametrize(
    "exc, kind",
    [
        (_parse_error(""), "empty"),
        (_parse_error("   \n"), "empty"),
        (_parse_error("hello"), "format"),
        (LMTimeoutError("slow", model="m"), "timeout"),
        (TimeoutError("slow"), "timeout"),
        (ProviderTimeout("slow"), "timeout"),
        (LMRateLimitError("429", model="m"), "api"),
        (ProviderRateLimit("429"), "api"),
    ],
)
def test_classify(exc, kind):
    assert classify(exc).kind == kind


def test_bugs_are_not_failures():
    assert classify(ValueError("bad argument")) is None
    assert classify(KeyError("x")) is None
    with pytest.raises(KeyError), lm_failures():
        raise KeyError("x")


def test_lm_failures_keeps_the_cause():
    with pytest.raises(LMFailure) as err, lm_failures():
        raise LMRateLimitError("429 too many", model="openai/x")
    assert err.value.kind == "api" and isinstance(err.value.__cause__, LMRateLimitError)
    assert err.value.model == "openai/x"
    assert not err.value.fatal


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown LMFailure kind"):
        LMFailure("weird", "x")


class FlakyEngine:
    """Times out ``failures`` times, then answers."""

    def __init__(self, failures):
        self.failures = failures
        self.calls = 0

    def complete(self, request):
        self.calls += 1
        if self.calls <= self.failures:
            raise ProviderTimeout("provider timed out", provider="test")
        return Response(id=None, model=request.model, finish_reason="stop",
                        message=Message.assistant([TextPart("[[ ## label ## ]]\nok\n\n[[ ## completed ## ]]")]),
                        usage=Usage(input_tokens=5, output_tokens=2, total_tokens=7))

    def stream(self, request):
        raise NotImplementedError

    def close(self):
        pass


@pytest.fixture
def no_backoff(monkeypatch):
    import dspy.clients.execution as execution

    monkeypatch.setattr(execution, "_delay", lambda exc, attempt: 0)


def test_transient_errors_are_retried(no_backoff):
    engine = FlakyEngine(failures=2)
    lm = ReflectLM("test/flaky", engine=engine, cache=False, num_retries=2)
    with dspy.context(lm=lm):
        assert dspy.Predict(Pick)(text="x").label == "ok"
    assert engine.calls == 3


def test_exhausted_retries_give_a_timeout_failure_and_a_failed_record(no_backoff):
    engine = FlakyEngine(failures=5)
    lm = ReflectLM("test/flaky", engine=engine, cache=False, num_retries=1)
    with dspy.context(lm=lm), CostMeter() as meter:
        with pytest.raises(LMFailure) as err, lm_failures():
            dspy.Predict(Pick)(text="x")
    assert err.value.kind == "timeout"
    assert engine.calls == 2
    assert [r.failure for r in meter.records] == ["timeout"]


def test_empty_reply_is_an_empty_failure():
    lm = ScriptedLM(["", ""])
    with dspy.context(lm=lm), pytest.raises(LMFailure) as err, lm_failures():
        dspy.Predict(Pick)(text="x")
    assert err.value.kind == "empty"


def test_a_script_running_out_is_a_bug_not_a_failure():
    lm = ScriptedLM([])
    with dspy.context(lm=lm), pytest.raises(Exception) as err, lm_failures():
        dspy.Predict(Pick)(text="x")
    assert not isinstance(err.value, LMFailure)
    assert "the script has only 0 replies" in str(err.value)
