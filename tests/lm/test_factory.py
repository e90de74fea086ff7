"""Settings -> LMs: the embedded engine for local/..., LiteLLM strings otherwise, no network, no weights."""
from __future__ import annotations

import socket
import subprocess
import sys

import dspy
import pytest
from dspy.lm15 import ContextLengthError, InvalidRequestError, Message, Request
from dspy.lm15 import Config

from reflect_sql.errors import UserError
from reflect_sql.lm import local_engine
from reflect_sql.lm.client import ReflectLM
from reflect_sql.lm.factory import configure_cache, configure_lms, make_lm
from reflect_sql.lm.local_engine import LocalEngine, from_chat_reply, to_chat_body
from reflect_sql.settings import Settings


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def test_local_names_select_the_embedded_engine_without_loading(tmp_path, no_network):
    settings = Settings(model_dir=tmp_path, lm_context_tokens=2048, lm_threads=1, lm_max_tokens=300)
    loads = local_engine.load_count
    lm = make_lm("local/qwen2.5-coder-0.5b", settings)
    assert isinstance(lm, ReflectLM) and lm.model == "local/qwen2.5-coder-0.5b"
    assert isinstance(lm.engine, LocalEngine)
    assert (lm.engine.model, lm.engine.n_ctx, lm.engine.threads) == ("qwen2.5-coder-0.5b", 2048, 1)
    assert lm.kwargs["max_tokens"] == 300 and lm.kwargs["temperature"] == 0.0
    assert lm.num_retries == 0
    assert local_engine.load_count == loads and list(tmp_path.iterdir()) == []


def test_unknown_local_model_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="unknown embedded model 'tiny-llama'"):
        make_lm("local/tiny-llama", Settings(model_dir=tmp_path))


@pytest.mark.parametrize(
    "name",
    ["anthropic/claude-sonnet-4-5", "openai/gpt-4o-mini", "ollama_chat/qwen2.5-coder:7b", "hosted_vllm/Qwen/Qwen2.5-7B"],
)
def test_other_names_go_to_litellm_as_given(name, no_network):
    settings = Settings(lm_timeout_s=33, lm_retries=4, lm_temperature=0.2, lm_max_tokens=640)
    lm = make_lm(name, settings, role="judge")
    assert lm.model == name and lm.engine == "auto" and lm.role == "judge"
    assert lm.kwargs["timeout"] == 33 and lm.kwargs["temperature"] == 0.2 and lm.kwargs["max_tokens"] == 640
    assert lm.num_retries == 4


def test_a_model_litellm_refuses_is_a_user_error():
    # OpenAI reasoning models need temperature 1.0; DSPy refuses 0.0 at construction.
    with pytest.raises(UserError, match="cannot use LM 'openai/o3' as generator"):
        make_lm("openai/o3", Settings())


def test_judge_defaults_to_the_generator_model_but_is_a_separate_lm(tmp_path):
    gen, judge = configure_lms(Settings(lm="openai/gpt-4o-mini", cache_dir=tmp_path / "c"))
    assert gen.model == judge.model == "openai/gpt-4o-mini"
    assert gen is not judge and (gen.role, judge.role) == ("generator", "judge")
    gen2, judge2 = configure_lms(Settings(lm="local/qwen2.5-coder-0.5b", judge_lm="anthropic/claude-sonnet-4-5",
                                          cache_dir=tmp_path / "c"))
    assert isinstance(gen2.engine, LocalEngine) and judge2.model == "anthropic/claude-sonnet-4-5"


def test_cache_lives_in_the_settings_cache_dir_and_can_be_switched_off(tmp_path):
    configure_cache(Settings(cache_dir=tmp_path / "dspy"))
    assert dspy.cache.enable_disk_cache and dspy.cache.disk_cache_dir == str(tmp_path / "dspy")
    configure_cache(Settings(lm_cache=False))
    assert not dspy.cache.enable_disk_cache and not dspy.cache.enable_memory_cache
    assert make_lm("openai/gpt-4o-mini", Settings(lm_cache=False)).cache is False


def test_importing_the_room_loads_neither_llama_cpp_nor_litellm():
    code = (
        "import sys, reflect_sql.lm.factory, reflect_sql.lm.scripted, reflect_sql.lm.failures;"
        "bad = [m for m in ('xllamacpp', 'litellm') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _request(**config):
    return Request(
        model="local/x",
        system="You write SQL.",
        messages=(Message.user("q1"), Message.assistant("a1"), Message(role="developer", parts=Message.user("be brief").parts),
                  Message.user("q2")),
        config=Config(**config),
    )


def test_request_translation_for_llama_cpp():
    schema = {"type": "object", "properties": {"sql": {"type": "string"}}, "required": ["sql"]}
    body = to_chat_body(
        _request(max_tokens=64, temperature=0.0, stop=("</s>",),
                 response_format={"type": "json_schema", "schema": schema, "name": "Out", "strict": True}),
        timeout_s=2.5,
    )
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "system", "user"]
    assert body["messages"][0]["content"] == "You write SQL." and body["messages"][-1]["content"] == "q2"
    assert body["max_tokens"] == 64 and body["temperature"] == 0.0 and body["stop"] == ["</s>"]
    assert body["response_format"] == {"type": "json_schema", "json_schema": {"name": "Out", "schema": schema}}
    assert body["t_max_predict_ms"] == 2500
    assert "top_p" not in body and "seed" not in body


def test_reply_translation_and_errors():
    reply = {
        "id": "c1",
        "choices": [{"finish_reason": "length", "message": {"role": "assistant", "content": "SELECT 1"}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 3, "total_tokens": 103,
                  "prompt_tokens_details": {"cached_tokens": 90}},
    }
    response = from_chat_reply(reply, "local/x")
    assert response.message.text == "SELECT 1" and response.finish_reason == "length"
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.cache_read_tokens) == (100, 3, 90)
    with pytest.raises(ContextLengthError):
        from_chat_reply({"error": {"code": 400, "type": "exceed_context_size_error",
                                   "message": "the request exceeds the available context size"}}, "local/x")
    with pytest.raises(InvalidRequestError, match="max_tokens"):
        from_chat_reply({"error": {"code": 400, "message": "Field 'max_tokens': type must be number"}}, "local/x")


def test_token_logprobs_are_asked_for_and_handed_back():
    body = to_chat_body(_request(max_tokens=8, logprobs=10))
    assert body["logprobs"] is True and body["top_logprobs"] == 10
    assert "logprobs" not in to_chat_body(_request(max_tokens=8)) and "top_logprobs" not in to_chat_body(_request(logprobs=0))
    reply = {"choices": [{"finish_reason": "stop", "message": {"content": "7"}, "logprobs": {"content": [
        {"id": 22, "token": "7", "bytes": [55], "logprob": -0.1,
         "top_logprobs": [{"id": 22, "token": "7", "bytes": [55], "logprob": -0.1},
                          {"id": 23, "token": "8", "bytes": [56], "logprob": -2.4}]}]}}], "usage": {}}
    (token,) = from_chat_reply(reply, "local/x").logprobs
    assert token.token == "7" and token.logprob == -0.1 and [t.token for t in token.top] == ["7", "8"]
    assert from_chat_reply({"choices": [{"message": {"content": "x"}}]}, "local/x").logprobs is None


def test_engine_state_round_trips_for_saved_programs(tmp_path):
    engine = LocalEngine("qwen2.5-coder-0.5b", model_dir=tmp_path, n_ctx=1024, threads=1, timeout_s=9)
    again = LocalEngine.load_state(engine.dump_state())
    assert again.dump_state() == engine.dump_state()


def _reply(text, reason, completion_tokens):
    return {"choices": [{"finish_reason": reason, "message": {"content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": completion_tokens, "total_tokens": 10 + completion_tokens}}


def test_generation_cut_by_the_time_limit_is_a_timeout(tmp_path, monkeypatch):
    from dspy.lm15 import TimeoutError as ProviderTimeout

    engine = LocalEngine("qwen2.5-coder-0.5b", model_dir=tmp_path, timeout_s=5)
    request = Request(model="local/x", messages=(Message.user("q"),), config=Config(max_tokens=64))
    sent = []
    monkeypatch.setattr(engine, "chat", lambda body: sent.append(body) or _reply("partial", "length", 12))
    with pytest.raises(ProviderTimeout, match="5s limit"):
        engine.complete(request)
    assert sent[0]["t_max_predict_ms"] == 5000
    # Running into max_tokens is a length stop, not a timeout; the caller gets the text.
    monkeypatch.setattr(engine, "chat", lambda body: _reply("long answer", "length", 64))
    assert engine.complete(request).message.text == "long answer"
    monkeypatch.setattr(engine, "chat", lambda body: _reply("SELECT 1", "stop", 3))
    assert engine.complete(request).finish_reason == "stop"


def test_model_servers_are_settings_of_each_role(monkeypatch, no_network):
    served = Settings(lm="openai/qwen2.5-coder-1.5b", lm_api_base="http://127.0.0.1:8080/v1")
    generator, judge = (make_lm(served.lm, served, "generator"), make_lm(served.effective_judge_lm, served, "judge"))
    for lm in (generator, judge):  # a judge on the generator's model uses its server
        assert lm.kwargs["api_base"] == "http://127.0.0.1:8080/v1" and lm.kwargs["api_key"] == "none"

    monkeypatch.setenv("JUDGE_KEY", "s3cret")
    split = Settings(lm="openai/small", lm_api_base="http://gen:8000/v1", judge_lm="openai/big",
                     judge_lm_api_base="http://judge:8001/v1", judge_lm_api_key_env="JUDGE_KEY")
    assert split.api_of("generator") == ("http://gen:8000/v1", None)
    assert split.api_of("judge") == ("http://judge:8001/v1", "JUDGE_KEY")
    judge = make_lm(split.effective_judge_lm, split, "judge")
    assert judge.kwargs["api_base"] == "http://judge:8001/v1" and judge.kwargs["api_key"] == "s3cret"
    # Another judge model does not inherit the generator's server.
    assert Settings(lm="openai/a", lm_api_base="http://gen/v1", judge_lm="anthropic/b").api_of("judge") == (None, None)
    assert "s3cret" not in split.to_yaml()  # only the variable's name is a setting

    with pytest.raises(UserError, match="NO_SUCH_KEY is not set"):
        make_lm("openai/x", Settings(lm_api_key_env="NO_SUCH_KEY"), "generator")
    with pytest.raises(UserError, match="openai/qwen2.5-coder-0.5b"):
        make_lm("local/qwen2.5-coder-0.5b", Settings(lm_api_base="http://127.0.0.1:1/v1"), "generator")


def test_serve_uses_the_in_process_engine_parameters_on_127_0_0_1(tmp_path):
    params = local_engine.server_params(tmp_path / "m.gguf", 2048, 1, parallel=2)
    assert (params.n_ctx, params.n_parallel, params.cpuparams.n_threads) == (4096, 2, 1)  # each slot its whole context
    same = local_engine.server_params(tmp_path / "m.gguf", 2048, 1)
    assert (same.n_ctx, same.n_parallel, same.cache_prompt, same.n_cache_reuse) == (2048, 1, True, 0)
