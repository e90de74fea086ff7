"""Clean shutdown of the long commands (eval, ablate, tune) on SIGTERM and Ctrl-C.

A batch scheduler stops a job with SIGTERM (then SIGKILL after its grace period); a person with
Ctrl-C. Inside ``stop_on_signals`` either one only records the request: raised at any point, an
exception could leave a write half done (an MLflow store's sqlite transaction left open holds its
lock, and every later write of the process, ending the run KILLED included, fails "database is
locked"). The runner looks at the request between questions (``raise_if_requested``) and raises
``Stopped``, a KeyboardInterrupt, from there, so whatever already ends cleanly on Ctrl-C does on
SIGTERM too: the results log is closed whole, the MLflow runs end KILLED, the study lock is
released. The questions in flight stop at their next LM call (``stop_at_next_lm_call``) and the
runner waits for them at most the LM timeout (``finish_in_flight``): one that finishes by then is
kept, one that does not is abandoned and runs again on resume. The process exits with 128 + the
signal: 143 on SIGTERM, 130 on Ctrl-C. A second signal while stopping exits at once.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import Future, wait
from contextlib import contextmanager
from typing import Any, Iterator

SIGNALS = (signal.SIGTERM, signal.SIGINT)
_IDLE_THREADS_S = 2.0
_requested: list[int] = []  # the signal that asked this process to stop, once one has


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGINT asked the run to stop; ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class QuestionAbandoned(BaseException):
    """Raised at an LM call of a question whose run is stopping. Not an Exception: the question's own
    error handling must not record it as the question's answer, so that the question reruns on resume."""


def exit_code(exc: BaseException) -> int:
    """128 + the signal, as a shell reports a process the signal ended: 143 SIGTERM, 130 Ctrl-C."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def raise_if_requested() -> None:
    """Raise ``Stopped`` if a signal asked to stop: call it where stopping leaves nothing half done."""
    if _requested:
        raise Stopped(_requested[0])


def _live_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and not t.daemon]


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """For the block, the first SIGTERM or SIGINT is a request to stop (``raise_if_requested``) and a
    second one ends the process at once. Leaving the block on a stop with a worker thread still in an
    LM call past its timeout ends the process there: the interpreter would otherwise wait for it."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return

    def handle(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if _requested:
            print(f"reflect-sql: {name} again: quitting at once", file=sys.stderr, flush=True)
            os._exit(128 + signum)
        _requested.append(signum)
        print(f"reflect-sql: {name}: stopping; the question(s) in flight end at their next LM call "
              f"({name} again to quit at once)", file=sys.stderr, flush=True)

    _requested.clear()
    previous = {s: signal.signal(s, handle) for s in SIGNALS}
    try:
        yield
    except KeyboardInterrupt as exc:
        deadline = time.monotonic() + _IDLE_THREADS_S
        for thread in _live_threads():  # idle pool workers end as soon as they see the pool shut down
            thread.join(max(0.0, deadline - time.monotonic()))
        if _live_threads():
            print(f"reflect-sql: error: stopped ({exc or 'interrupted'}); a question still in an LM call was "
                  "abandoned", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(exit_code(exc))
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _requested.clear()


@contextmanager
def stop_at_next_lm_call(stop: threading.Event) -> Iterator[None]:
    """In the block (a question's worker thread), an LM call started after ``stop`` is set raises
    ``QuestionAbandoned``; the call already running finishes."""
    import dspy
    from dspy.utils.callback import BaseCallback

    class StopCheck(BaseCallback):
        def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
            if stop.is_set():
                raise QuestionAbandoned()

    with dspy.context(callbacks=[*(dspy.settings.get("callbacks") or []), StopCheck()]):
        yield


def finish_in_flight(pending: dict[Future, Any], timeout_s: float) -> list[tuple[Future, Any]]:
    """The futures of ``pending`` that finish with a result within ``timeout_s``, with their items;
    those not started yet are cancelled, and those abandoned, failed or still running then are left
    out (their questions run again on resume)."""
    for future in pending:
        future.cancel()  # only one that has not started
    done, _ = wait(pending, timeout=timeout_s)
    return [(f, pending[f]) for f in done if not f.cancelled() and f.exception() is None]
