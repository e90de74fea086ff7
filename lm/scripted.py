"""A scripted LM for unit tests: canned outputs per predictor, through DSPy's real call path.

``ScriptedLM`` is a ``ReflectLM`` whose engine answers from a script instead of a model, so
adapters, the DSPy cache, cost accounting, cassettes and ``LMFailure`` behave as with a real LM.
A script is one of:

  - a list of field dicts, answered in order whatever the predictor::

        ScriptedLM([{"sql": "SELECT 1"}, {"score": 9}])

  - a dict keyed by predictor name: the class name of the predictor's signature, or, for string
    signatures and ChainOfThought, the predictor's attribute name in the program (``"judge"`` for
    ``self.judge = dspy.ChainOfThought("sql -> score: int")``); each value is one field dict
    (answered every time) or a list answered in order (the last one then repeats)::

        ScriptedLM({
            "GenerateSQL": {"sql": "SELECT name FROM dishes"},
            "JudgeSemantic": [{"score": 2, "feedback": "missing join"}, {"score": 9, "feedback": "ok"}],
        })

  - a callable ``(signature_name, inputs) -> field dict``; ``inputs`` maps each input field to the
    text the adapter rendered for it::

        ScriptedLM(lambda name, inputs: {"answer": inputs["question"].upper()})

A string instead of a field dict is sent verbatim (e.g. to test unparsable replies). Field values
that are not strings are written as JSON. A score given as ``Probabilities({4: 0.6, 2: 0.4})`` is
written as its most probable value; when the request asks for token log-probabilities, the reply's
tokens carry them, with that field's digits as the alternatives at its position. ChainOfThought's ``reasoning`` field is filled in when a
reply leaves it out. Every call reports usage (whitespace-separated words of
the prompt and of the reply as tokens), and ``lm.calls`` lists ``(signature_name, inputs)``.

    lm = ScriptedLM({...})
    with dspy.context(lm=lm):
        program(question="...")
"""
from __future__ import annotations

import json
import re
import threading
from typing import Any, Callable, Union

import math

import dspy
from dspy.lm15 import Message, Request, Response, TextPart, TokenLogprob, TopLogprob, Usage, response_to_events

from reflect_sql.lm.accounting import current_predictor
from reflect_sql.lm.adapters import parse_head
from reflect_sql.lm.client import ReflectLM
from reflect_sql.lm.threaded import ThreadedAsyncEngine

Reply = Union[dict, str]
Script = Union[list, dict, Callable[[str, dict], Reply]]

_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n")


class ScriptError(AssertionError):
    """The script has no answer for a call, or an answer that does not fit the signature."""


class Probabilities(dict):
    """A scripted score field: value -> probability of the token the model would write for it."""

    def written(self) -> int:
        return max(self, key=self.__getitem__)


def _token_logprobs(text: str, reply: Reply) -> tuple[TokenLogprob, ...]:
    """The reply as tokens: each Probabilities field's written value is one token with its
    alternatives, and the text between them one token of probability 1."""
    spots = []
    if isinstance(reply, dict):
        for name, value in reply.items():
            if isinstance(value, Probabilities):
                found = re.search(r"(\[\[ ## " + re.escape(name) + r" ## \]\]\n|\"" + re.escape(name) + r"\": )", text)
                if found:
                    spots.append((found.end(), value))
    tokens, at = [], 0
    for start, value in sorted(spots, key=lambda spot: spot[0]):
        if start > at:
            tokens.append(TokenLogprob(token=text[at:start], logprob=0.0))
        digits = str(value.written())
        top = tuple(TopLogprob(token=str(v), logprob=math.log(p)) for v, p in value.items() if p > 0)
        tokens.append(TokenLogprob(token=digits, logprob=math.log(value[value.written()]), top=top))
        at = start + len(digits)
    if at < len(text):
        tokens.append(TokenLogprob(token=text[at:], logprob=0.0))
    return tuple(tokens)


def _text(value: Any) -> str:
    if isinstance(value, Probabilities):
        return str(value.written())
    if isinstance(value, str):
        return value
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    return json.dumps(value, ensure_ascii=False)


def _inputs(user_text: str) -> dict[str, str]:
    # The adapters end the last user message with their "Respond with ..." instruction.
    body = user_text.split("\n\nRespond with", 1)[0]
    parts = _FIELD.split(body)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _output_fields() -> list[str] | None:
    for module in reversed(dspy.settings.get("caller_modules") or []):
        signature = getattr(module, "signature", None)
        if signature is not None:
            return list(signature.output_fields)
    return None


class ScriptedEngine:
    supports_response_schema = False
    supported_params = frozenset({"temperature", "max_tokens", "stop", "response_format", "logprobs", "top_logprobs"})

    def __init__(self, script: Script):
        if not (callable(script) or isinstance(script, (list, dict))):
            raise TypeError("a script is a list of field dicts, a dict keyed by signature name, or a callable")
        self.script = script
        self.calls: list[tuple[str, dict]] = []
        self.logprobs_asked: list[int | None] = []  # per call: the alternatives asked for, None when not asked
        self.response_formats: list[Any] = []  # per call: the response_format asked for (None when not)
        self._lock = threading.Lock()
        self._position = 0
        self._per_signature: dict[str, int] = {}

    def _next(self, name: str, inputs: dict) -> Reply:
        if isinstance(self.script, list):
            if self._position >= len(self.script):
                raise ScriptError(f"the script has only {len(self.script)} replies; call {self._position + 1} was {name}")
            self._position += 1
            return self.script[self._position - 1]
        if name not in self.script:
            raise ScriptError(f"the script has no reply for predictor {name!r} (it has {sorted(self.script)})")
        replies = self.script[name]
        if not isinstance(replies, list):
            return replies
        if not replies:
            raise ScriptError(f"the script's reply list for {name!r} is empty")
        index = self._per_signature.get(name, 0)
        self._per_signature[name] = index + 1
        return replies[min(index, len(replies) - 1)]

    def _render(self, reply: Reply, json_wanted: bool) -> str:
        if isinstance(reply, str):
            return reply
        expected = _output_fields()
        if expected is not None and "reasoning" in expected and "reasoning" not in reply:
            reply = {"reasoning": "(scripted)", **reply}
        if expected is not None:
            missing = [f for f in expected if f not in reply]
            if missing:
                raise ScriptError(f"scripted reply {reply!r} lacks output field(s) {missing}")
        if json_wanted:
            return json.dumps({k: (v.model_dump() if hasattr(v, "model_dump") else
                                   v.written() if isinstance(v, Probabilities) else v) for k, v in reply.items()},
                              ensure_ascii=False)
        sections = [f"[[ ## {k} ## ]]\n{_text(v)}" for k, v in reply.items()]
        return "\n\n".join(sections + ["[[ ## completed ## ]]"])

    def complete(self, request: Request) -> Response:
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system or ())
        last_user = next((m.text or "" for m in reversed(request.messages) if m.role == "user"), "")
        name = current_predictor() or "unknown"
        # The shared-head layout puts the question, evidence and schema in the system message.
        inputs = {**parse_head(system), **_inputs(last_user)}
        json_wanted = bool(request.config.response_format) or "JSON object" in last_user
        with self._lock:
            self.calls.append((name, inputs))
            self.logprobs_asked.append(request.config.logprobs)
            self.response_formats.append(request.config.response_format)
            # A callable script runs outside the lock: it may be slow or call other LMs.
            reply = None if callable(self.script) else self._next(name, inputs)
        if reply is None:
            reply = self.script(name, inputs)
        text = self._render(reply, json_wanted)
        prompt_words = len(system.split()) + sum(len((m.text or "").split()) for m in request.messages)
        completion_words = len(text.split())
        return Response(
            id=None,
            model=request.model,
            message=Message.assistant([TextPart(text)]),
            finish_reason="stop",
            usage=Usage(input_tokens=prompt_words, output_tokens=completion_words,
                        total_tokens=prompt_words + completion_words),
            logprobs=_token_logprobs(text, reply) if request.config.logprobs is not None else None,
        )

    def stream(self, request: Request):
        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


class ScriptedLM(ReflectLM):
    """See the module docstring. ``cache`` is off by default so every call reaches the script."""

    def __init__(self, script: Script, *, model: str = "scripted/lm", cache: bool = False,
                 role: str | None = None, cassette=None, **kwargs):
        self.engine_impl = ScriptedEngine(script)
        super().__init__(model, engine=self.engine_impl, async_engine=ThreadedAsyncEngine(self.engine_impl),
                         cache=cache, num_retries=0, role=role, cassette=cassette, **kwargs)

    @property
    def calls(self) -> list[tuple[str, dict]]:
        return list(self.engine_impl.calls)
