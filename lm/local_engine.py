"""The embedded LM as a DSPy 3.4 engine: ``dspy.LM("local/qwen2.5-coder-1.5b", engine=LocalEngine(...))``.

llama.cpp's server runs in-process through xllamacpp. One server is loaded per process per
(model file, context size, threads) and shared by every engine object and thread; calls are
serialised because the server has a single slot, which is also what keeps the prompt-prefix
KV cache useful: consecutive prompts that share their stable head (instructions, demos, schema)
only pay for the tokens after it.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspy.lm15 import (
    ContextLengthError,
    InvalidRequestError,
    Message,
    Request,
    Response,
    ServerError,
    TextPart,
    TimeoutError as LMTimeout,
    Usage,
    response_to_events,
)
from dspy._vendor.lm15.providers.common import openai_token_logprobs

from reflect_sql.lm.models import DEFAULT_MODEL, ensure_model, get_model
from reflect_sql.lm.threaded import ThreadedAsyncEngine
from reflect_sql.settings import Settings

LOCAL_PREFIX = "local/"

# Without PASSIVE, OpenMP worker threads spin while waiting; on 2 cores any other busy process
# then collapses generation speed (measured 15 -> 0.5 tok/s). Must be set before the import.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def local_model_name(model: str) -> str | None:
    """``"local/qwen2.5-coder-1.5b"`` -> ``"qwen2.5-coder-1.5b"``; None for any other LM string."""
    if model.startswith(LOCAL_PREFIX):
        return model[len(LOCAL_PREFIX):] or DEFAULT_MODEL
    return None


@dataclass
class _Loaded:
    server: Any
    lock: threading.Lock


_servers: dict[tuple, _Loaded] = {}
_servers_lock = threading.Lock()
load_count = 0  # how many servers this process has started; tests assert replay loads none


def server_params(path: Path, n_ctx: int, threads: int, parallel: int = 1):
    """llama.cpp's server parameters, the same in this process and behind ``serve``'s HTTP port, so
    that both answer alike."""
    import xllamacpp  # llama.cpp's native library: loaded when a model is, not by every importer of lm

    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    # Each slot gets the whole context: the server splits n_ctx between its slots.
    params.n_ctx = n_ctx * parallel
    params.n_parallel = parallel
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.verbosity = -1
    # Prefix reuse only (cache_prompt). n_cache_reuse (KV shifting of non-prefix chunks) stays
    # off: shifted KV entries change numerics, so outputs would depend on what ran before.
    params.cache_prompt = True
    params.n_cache_reuse = 0
    # llama.cpp keeps evicted prompt states in RAM and restores the best prefix match; this
    # is what makes alternating generator/judge prompts cheap. Bounded to stay a good neighbour.
    params.cache_ram_mib = 1024
    return params


def serve(model: str, model_dir: str | os.PathLike, *, port: int, n_ctx: int = 4096, threads: int = 2,
          parallel: int = 1, host: str = "127.0.0.1"):
    """The embedded model behind llama.cpp's own HTTP server (OpenAI-compatible, ``/v1``) on
    ``host:port``, listening until the returned server is gone. ``parallel`` > 1 decodes that many
    requests together: faster for concurrent callers, but a batch's numerics differ from one request's."""
    import xllamacpp  # as in server_params

    params = server_params(ensure_model(model, model_dir), n_ctx, threads, parallel)
    params.hostnames = [host]
    params.port = port
    params.model_alias = {model}
    return xllamacpp.Server(params)


def _server(path: Path, n_ctx: int, threads: int) -> _Loaded:
    global load_count
    key = (str(path), n_ctx, threads)
    with _servers_lock:
        loaded = _servers.get(key)
        if loaded is None:
            import xllamacpp  # llama.cpp's native library: loaded when a model is, not by every importer of lm

            loaded = _Loaded(xllamacpp.Server(server_params(path, n_ctx, threads)), threading.Lock())
            _servers[key] = loaded
            load_count += 1
        return loaded


def forget_prompt_caches() -> int:
    """Unload the embedded models, and with them the prompt states their prefix caches hold (up to
    ``cache_ram_mib`` of earlier prompts); the next call loads its model afresh. A run that must
    not be served by prompts another run computed (each variant of a benchmark or ablation in one
    process) starts with this. Calls in flight keep their server until they end. Returns how
    many servers were unloaded."""
    with _servers_lock:
        dropped = len(_servers)
        _servers.clear()
    return dropped


def _system_text(system) -> str | None:
    if system is None:
        return None
    return system if isinstance(system, str) else "".join(getattr(p, "text", "") or "" for p in system)


def _response_format(fmt: dict | None) -> dict | None:
    """DSPy hands ``{"type": "json_schema", "schema": ..., "name": ...}``; llama.cpp wants OpenAI's shape."""
    if not fmt:
        return None
    if fmt.get("type") == "json_schema" and "schema" in fmt and "json_schema" not in fmt:
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name") or "output", "schema": fmt["schema"]}}
    return fmt


def to_chat_body(request: Request, *, timeout_s: float | None = None) -> dict:
    """The OpenAI-style body xllamacpp's ``handle_chat_completions`` takes."""
    if request.tools:
        raise InvalidRequestError("the embedded LM engine does not support tool calling")
    messages = []
    if (system := _system_text(request.system)) is not None:
        messages.append({"role": "system", "content": system})
    for m in request.messages:
        role = "system" if m.role == "developer" else m.role
        if role not in ("system", "user", "assistant"):
            raise InvalidRequestError(f"the embedded LM engine cannot send a {m.role!r} message")
        messages.append({"role": role, "content": m.text or ""})
    cfg = request.config
    body: dict[str, Any] = {"messages": messages}
    for key in ("max_tokens", "temperature", "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty"):
        value = getattr(cfg, key)
        if value is not None:
            body[key] = value
    if cfg.stop:
        body["stop"] = list(cfg.stop)
    if (fmt := _response_format(cfg.response_format)) is not None:
        body["response_format"] = fmt
    if cfg.logprobs is not None:
        # Config.logprobs is the number of alternatives per position (0: the chosen tokens only).
        body["logprobs"] = True
        if cfg.logprobs > 0:
            body["top_logprobs"] = cfg.logprobs
    if timeout_s is not None:
        # llama.cpp stops generating after this long (once a newline was produced). Only generation
        # is bounded: a call into the server cannot be interrupted, and prompt processing is not
        # covered by this limit.
        body["t_max_predict_ms"] = int(timeout_s * 1000)
    return body


def _raise_for_error(reply: dict, model: str) -> None:
    error = reply.get("error")
    if not error:
        return
    message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
    code = error.get("code") if isinstance(error, dict) else None
    kind = error.get("type", "") if isinstance(error, dict) else ""
    if "context" in kind or "context size" in message:
        raise ContextLengthError(message, provider="local")
    if isinstance(code, int) and code >= 500:
        raise ServerError(message, provider="local")
    raise InvalidRequestError(message, provider="local")


def from_chat_reply(reply: dict, model: str) -> Response:
    _raise_for_error(reply, model)
    choice = reply["choices"][0]
    usage = reply.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    reason = choice.get("finish_reason") or "stop"
    token_logprobs = openai_token_logprobs((choice.get("logprobs") or {}).get("content"))
    return Response(
        id=reply.get("id"),
        model=model,
        message=Message.assistant([TextPart(choice["message"].get("content") or "")]),
        finish_reason=reason if reason in ("stop", "length") else "stop",
        usage=Usage(
            input_tokens=usage.get("prompt_tokens"),
            output_tokens=usage.get("completion_tokens"),
            total_tokens=usage.get("total_tokens"),
            cache_read_tokens=cached,
        ),
        provider_data={"timings": reply.get("timings", {})},
        logprobs=token_logprobs or None,
    )


def _cut_by_time_limit(reply: dict, body: dict) -> bool:
    """llama.cpp reports a stop at ``t_max_predict_ms`` as "length" although fewer than
    ``max_tokens`` were generated; that partial answer is a timeout, not an answer."""
    if "t_max_predict_ms" not in body or not reply.get("choices"):
        return False
    generated = (reply.get("usage") or {}).get("completion_tokens") or 0
    limit = body.get("max_tokens")
    return reply["choices"][0].get("finish_reason") == "length" and limit is not None and generated < limit


class LocalEngine:
    """A DSPy engine over the embedded GGUF model; the weights load on the first call, not before."""

    supports_response_schema = True
    supports_function_calling = False
    supports_reasoning = False
    supported_params = frozenset({"temperature", "max_tokens", "stop", "response_format", "top_p", "top_k", "seed",
                                  "logprobs", "top_logprobs"})

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        model_dir: str | os.PathLike | None = None,
        n_ctx: int = 4096,
        threads: int = 2,
        timeout_s: float | None = None,
    ):
        get_model(model)  # unknown names fail here, at construction, not on the first call
        if model_dir is None:
            model_dir = Settings().model_dir
        self.model = model
        self.model_dir = Path(model_dir).expanduser()
        self.n_ctx = n_ctx
        self.threads = threads
        self.timeout_s = timeout_s
        self.calls = 0  # requests this engine sent to the model (tests: a replay sends none)

    @classmethod
    def from_settings(cls, model: str, settings) -> "LocalEngine":
        return cls(
            model,
            model_dir=settings.model_dir,
            n_ctx=settings.lm_context_tokens,
            threads=settings.lm_threads,
            timeout_s=settings.lm_timeout_s,
        )

    def _loaded(self) -> _Loaded:
        return _server(ensure_model(self.model, self.model_dir), self.n_ctx, self.threads)

    def chat(self, body: dict) -> dict:
        """One raw OpenAI-style call (the benchmark uses it to read llama.cpp's timings)."""
        loaded = self._loaded()
        with loaded.lock:
            self.calls += 1
            return loaded.server.handle_chat_completions(body)

    def complete(self, request: Request) -> Response:
        body = to_chat_body(request, timeout_s=self.timeout_s)
        reply = self.chat(body)
        response = from_chat_reply(reply, request.model)
        if _cut_by_time_limit(reply, body):
            raise LMTimeout(
                f"the embedded LM stopped generating after the {self.timeout_s:g}s limit (lm_timeout_s)",
                provider="local",
            )
        return response

    def stream(self, request: Request):
        return response_to_events(self.complete(request))

    def close(self) -> None:
        # The server is shared by every engine in the process; it lives until the process ends.
        pass

    def dump_state(self) -> dict:
        return {"model": self.model, "model_dir": str(self.model_dir), "n_ctx": self.n_ctx,
                "threads": self.threads, "timeout_s": self.timeout_s}

    @classmethod
    def load_state(cls, state: dict) -> "LocalEngine":
        return cls(state["model"], model_dir=state.get("model_dir"), n_ctx=state.get("n_ctx", 4096),
                   threads=state.get("threads", 2), timeout_s=state.get("timeout_s"))


class AsyncLocalEngine(ThreadedAsyncEngine):
    """``acall`` counterpart of LocalEngine (saved and loaded with it)."""

    supports_response_schema = True

    def dump_state(self) -> dict:
        return self.sync.dump_state()

    @classmethod
    def load_state(cls, state: dict) -> "AsyncLocalEngine":
        return cls(LocalEngine.load_state(state))
