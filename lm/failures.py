"""LM failures as one typed error that the loops can handle, instead of a crash of a long run.

Retries with exponential backoff for transient API errors (rate limits, timeouts, 5xx, transport)
are DSPy's own (``dspy.LM(num_retries=...)``, set from ``lm_retries``); what is still failing after
them reaches the caller here. The loops wrap predictor calls:

    with lm_failures():
        out = self.judge(question=q, sql=sql)
    ...
    except LMFailure as failure:
        if failure.fatal:  # a cassette miss: the replay is not the recorded run, stop loudly
            raise
        ...  # e.g. treat the judgement as failed and move on

The adapters (``lm/adapters.py``) count ChatAdapter's JSONAdapter fallbacks; an unparsable reply
that survives them arrives here as ``AdapterParseError`` and becomes the failure kind "parse".
"""
from __future__ import annotations

import builtins
from contextlib import contextmanager
from typing import Iterator, Literal

from dspy.lm15 import LM15Error
from dspy.utils.exceptions import AdapterParseError, LMError, LMTimeoutError


FailureKind = Literal["timeout", "api", "format", "empty", "miss"]
KINDS = ("timeout", "api", "format", "empty", "miss")


class LMFailure(Exception):
    """An LM call that produced no usable output.

    kind: ``timeout`` (the model or provider took too long), ``api`` (provider/engine error after
    retries), ``format`` (the reply did not parse into the signature's typed fields), ``empty`` (the
    model returned nothing), ``miss`` (a replay asked for a call its cassette does not hold).
    """

    def __init__(self, kind: FailureKind, message: str, *, model: str | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown LMFailure kind {kind!r}; expected one of {KINDS}")
        self.kind = kind
        self.message = message
        self.model = model
        super().__init__(f"{kind}: {message}")

    @property
    def fatal(self) -> bool:
        """A miss means the run differs from the recording; carrying on would hide that."""
        return self.kind == "miss"


def classify(exc: BaseException) -> LMFailure | None:
    """The LMFailure an exception stands for, or None when it is a bug that must propagate."""
    if isinstance(exc, LMFailure):
        return exc
    cause = exc
    while cause is not None:
        # DSPy wraps whatever an engine raises; a failed assertion inside (e.g. a test script that
        # ran out) is a bug in the caller, not a model failure to recover from.
        if isinstance(cause, AssertionError):
            return None
        cause = cause.__cause__
    model = getattr(exc, "model", None)
    if isinstance(exc, AdapterParseError):
        response = exc.lm_response
        if response is None or not str(response).strip():
            return LMFailure("empty", f"the LM returned no text for {exc.signature.__name__}", model=model)
        first_line = str(exc).strip().splitlines()[0]
        return LMFailure("format", f"{exc.adapter_name} could not parse the reply: {first_line}", model=model)
    if isinstance(exc, (LMTimeoutError, builtins.TimeoutError)):
        return LMFailure("timeout", str(exc) or type(exc).__name__, model=model)
    if isinstance(exc, (LMError, LM15Error)):
        return LMFailure("api", f"{type(exc).__name__}: {exc}", model=model)
    return None


@contextmanager
def lm_failures() -> Iterator[None]:
    """Re-raise LM and parse errors from the block as ``LMFailure``; other errors pass unchanged."""
    try:
        yield
    except Exception as exc:
        failure = classify(exc)
        if failure is None or failure is exc:
            raise
        raise failure from exc
