"""Settings -> language models: the generator and, separately, the judge (the paper's role isolation).

``local/<name>`` selects the embedded model (``local_engine``); any other string goes to LiteLLM as
given (``anthropic/...``, ``openai/...``, ``ollama_chat/...``, ``hosted_vllm/...``), with API keys
from the environment. ``lm_api_base`` / ``judge_lm_api_base`` point a role at a model server (any
OpenAI-compatible one: ``openai/<served name>``), and ``*_api_key_env`` name the variable holding its
key. Building an LM touches neither the network nor the model weights.
"""
from __future__ import annotations

import os

import dspy
from dspy.utils.exceptions import LMError

from reflect_sql.errors import UserError
from reflect_sql.lm.cassette import Cassette
from reflect_sql.lm.client import ReflectLM
from reflect_sql.lm.cost_ledger import CostLedger
from reflect_sql.lm.local_engine import LOCAL_PREFIX, AsyncLocalEngine, LocalEngine, local_model_name

ROLES = ("generator", "judge")


def make_cassette(settings) -> Cassette | None:
    if settings.lm_record_dir and settings.lm_replay_dir:
        raise UserError("set either lm_record_dir (--record) or lm_replay_dir (--replay), not both")
    if settings.lm_replay_dir:
        return Cassette(settings.lm_replay_dir, "replay")
    if settings.lm_record_dir:
        return Cassette(settings.lm_record_dir, "record")
    return None


def make_lm(model_name: str, settings, role: str = "generator", *, cassette: Cassette | None = None,
            ledger: CostLedger | None = None) -> ReflectLM:
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {role!r}")
    common = dict(
        role=role,
        cassette=cassette,
        ledger=ledger,
        temperature=settings.lm_temperature,
        max_tokens=settings.lm_max_tokens,
        cache=settings.lm_cache,
    )
    local = local_model_name(model_name)
    api_base, key_env = settings.api_of(role)
    if local is not None:
        if api_base:
            raise UserError(f"{model_name} runs in this process, so it takes no {role} api_base ({api_base}); "
                            f"for a served model name it as LiteLLM does, e.g. openai/{local}")
        engine = LocalEngine.from_settings(local, settings)
        # Retrying an in-process model repeats the same deterministic work; failures surface at once.
        return ReflectLM(f"{LOCAL_PREFIX}{local}", engine=engine, async_engine=AsyncLocalEngine(engine),
                         num_retries=0, **common)
    server: dict = {}
    if api_base:
        server["api_base"] = api_base
        # An OpenAI-compatible server without keys (llama.cpp, vLLM) still needs some key for the client.
        server["api_key"] = "none"
    if key_env:
        if not os.environ.get(key_env):
            raise UserError(f"the {role} LM's API key variable {key_env} is not set in the environment")
        server["api_key"] = os.environ[key_env]
    try:
        return ReflectLM(model_name, timeout=settings.lm_timeout_s, num_retries=settings.lm_retries, **common, **server)
    except (ValueError, TypeError, LMError) as exc:
        raise UserError(f"cannot use LM {model_name!r} as {role}: {exc}") from None


def configure_cache(settings) -> None:
    """DSPy's response cache lives in the settings' cache dir; ``lm_cache: false`` turns it off."""
    dspy.configure_cache(
        enable_disk_cache=settings.lm_cache,
        enable_memory_cache=settings.lm_cache,
        disk_cache_dir=str(settings.cache_dir),
    )


def configure_lms(settings) -> tuple[ReflectLM, ReflectLM]:
    """(generator, judge): two LM objects even when both name the same model, so their calls,
    histories and accounting stay apart; the judge defaults to the generator's model."""
    configure_cache(settings)
    cassette = make_cassette(settings)
    # Beside a shared response cache, what its responses first cost (ablations sharing one cache).
    ledger = CostLedger(settings.cache_dir) if settings.lm_cache else None
    generator = make_lm(settings.lm, settings, "generator", cassette=cassette, ledger=ledger)
    judge = make_lm(settings.effective_judge_lm, settings, "judge", cassette=cassette, ledger=ledger)
    return generator, judge
