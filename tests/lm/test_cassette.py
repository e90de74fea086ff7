"""Record/replay: identical outputs with zero model calls, loud misses, stable request hashes."""
from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from reflect_sql.errors import UserError
from reflect_sql.lm import local_engine
from reflect_sql.lm.accounting import CostMeter
from reflect_sql.lm.cassette import Cassette, CassetteMiss, request_hash
from reflect_sql.lm.factory import make_cassette, make_lm
from reflect_sql.lm.failures import LMFailure, lm_failures
from reflect_sql.lm.scripted import ScriptedLM
from reflect_sql.settings import Settings


class Answer(dspy.Signature):
    """Answer."""

    question: str = dspy.InputField()
    answer: str = dspy.OutputField()
    confidence: float = dspy.OutputField()


def _answers(name, inputs):
    return {"answer": inputs["question"][::-1], "confidence": len(inputs["question"]) / 10}


QUESTIONS = ["alpha", "beta", "gamma", "beta"]


def _run(lm):
    predict = dspy.Predict(Answer)
    with dspy.context(lm=lm):
        return [predict(question=q).toDict() for q in QUESTIONS]


def test_replay_gives_identical_outputs_with_zero_calls(tmp_path):
    recorder = ScriptedLM(_answers, cassette=Cassette(tmp_path / "tape", "record"))
    recorded = _run(recorder)
    assert len(recorder.calls) == 4
    assert len(Cassette(tmp_path / "tape", "replay")) == 3  # "beta" twice is one request

    player = ScriptedLM([], cassette=Cassette(tmp_path / "tape", "replay"))  # any real call would fail
    with CostMeter() as meter:
        replayed = _run(player)
    assert replayed == recorded
    assert player.calls == []
    summary = meter.summary()
    assert summary["replays"] == 4 and summary["lm_calls"] == 4
    # A replay reports the tokens the recorded calls cost.
    assert summary["prompt_tokens"] > 0


def test_samples_of_one_prompt_are_recorded_and_replayed_apart_by_rollout_id(tmp_path):
    samples = iter(["first", "second", "third"])
    recorder = ScriptedLM(lambda name, inputs: {"answer": next(samples), "confidence": 0.5},
                          cassette=Cassette(tmp_path / "tape", "record"))
    predict = dspy.Predict(Answer)

    def sample(lm, rollout):
        with dspy.context(lm=lm):
            return predict(question="same", config={"temperature": 0.7, "rollout_id": rollout}).answer

    assert [sample(recorder, r) for r in (1, 2)] == ["first", "second"]
    assert len(Cassette(tmp_path / "tape", "replay")) == 2
    player = ScriptedLM([], cassette=Cassette(tmp_path / "tape", "replay"))
    assert [sample(player, r) for r in (2, 1)] == ["second", "first"]
    with pytest.raises(CassetteMiss):
        sample(player, 3)


def test_recording_captures_cache_hits_too(tmp_path):
    recorder = ScriptedLM(_answers, cache=True, cassette=Cassette(tmp_path / "tape", "record"))
    _run(recorder)
    assert len(recorder.calls) == 3
    assert len(Cassette(tmp_path / "tape", "replay")) == 3


def test_a_miss_is_loud_typed_and_names_the_hash(tmp_path):
    ScriptedLM(_answers, cassette=Cassette(tmp_path / "tape", "record"))  # creates the empty dir
    player = ScriptedLM(_answers, cassette=Cassette(tmp_path / "tape", "replay"))
    with dspy.context(lm=player), pytest.raises(CassetteMiss) as err, lm_failures():
        dspy.Predict(Answer)(question="never recorded")
    miss = err.value
    assert isinstance(miss, LMFailure) and miss.kind == "miss" and miss.fatal
    assert len(miss.key) == 64 and miss.key in str(miss)
    assert player.calls == []


def test_a_changed_prompt_misses(tmp_path):
    _run(ScriptedLM(_answers, cassette=Cassette(tmp_path / "tape", "record")))
    player = ScriptedLM(_answers, cassette=Cassette(tmp_path / "tape", "replay"))
    predict = dspy.Predict(Answer.with_instructions("Answer briefly."))
    with dspy.context(lm=player), pytest.raises(CassetteMiss):
        predict(question="alpha")


def test_request_hash_is_normalised():
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0, "max_tokens": 5}
    reordered = dict(reversed(list(base.items())))
    assert request_hash(base) == request_hash(reordered)
    assert request_hash(base) == request_hash({**base, "api_key": "secret", "timeout": 3, "top_p": None})
    assert request_hash(base) != request_hash({**base, "temperature": 0.7})
    assert request_hash(base) != request_hash({**base, "model": "other"})
    assert request_hash(base) != request_hash({**base, "messages": [{"role": "user", "content": "hi!"}]})


def test_concurrent_recording_writes_whole_files(tmp_path):
    recorder = ScriptedLM(_answers, cassette=Cassette(tmp_path / "tape", "record"))
    predict = dspy.Predict(Answer)

    def ask(i):
        with dspy.context(lm=recorder):
            return predict(question=f"q{i % 10}").answer

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(ask, range(60)))
    files = list((tmp_path / "tape").glob("*.json"))
    assert len(files) == 10
    assert all(json.loads(f.read_text())["format"] == "reflect-sql-cassette-v1" for f in files)
    assert not list((tmp_path / "tape").glob("*.tmp"))


def test_local_model_replays_without_loading_weights(tmp_path):
    """The embedded engine is never touched: the model dir does not even exist."""
    settings = Settings(lm="local/qwen2.5-coder-0.5b", model_dir=tmp_path / "no-models", lm_cache=False)
    # Record through a scripted engine under the local model's name and parameters.
    recorder = ScriptedLM(_answers, model="local/qwen2.5-coder-0.5b", cassette=Cassette(tmp_path / "tape", "record"),
                          temperature=settings.lm_temperature, max_tokens=settings.lm_max_tokens)
    recorded = _run(recorder)
    loads = local_engine.load_count
    player = make_lm(settings.lm, settings, cassette=Cassette(tmp_path / "tape", "replay"))
    assert _run(player) == recorded
    assert player.engine.calls == 0 and local_engine.load_count == loads
    assert not (tmp_path / "no-models").exists()


def test_settings_choose_the_cassette(tmp_path):
    assert make_cassette(Settings()) is None
    assert make_cassette(Settings(lm_record_dir=tmp_path / "r")).mode == "record"
    (tmp_path / "p").mkdir()
    assert make_cassette(Settings(lm_replay_dir=tmp_path / "p")).replaying
    with pytest.raises(UserError, match="not both"):
        make_cassette(Settings(lm_record_dir=tmp_path / "r", lm_replay_dir=tmp_path / "p"))
    with pytest.raises(UserError, match="replay cassette not found"):
        make_cassette(Settings(lm_replay_dir=tmp_path / "missing"))


class TimingOutEngine:
    def __init__(self):
        self.calls = 0

    def complete(self, request):
        from dspy.lm15 import TimeoutError as ProviderTimeout

        self.calls += 1
        raise ProviderTimeout("provider timed out", provider="test")

    def stream(self, request):
        raise NotImplementedError

    def close(self):
        pass


def test_failures_replay_as_the_same_failure(tmp_path):
    from reflect_sql.lm.client import ReflectLM

    recorder = ReflectLM("test/slow", engine=TimingOutEngine(), cache=False, num_retries=0,
                         cassette=Cassette(tmp_path / "tape", "record"))
    with dspy.context(lm=recorder), pytest.raises(LMFailure) as recorded, lm_failures():
        dspy.Predict(Answer)(question="alpha")
    engine = TimingOutEngine()
    player = ReflectLM("test/slow", engine=engine, cache=False, num_retries=0,
                       cassette=Cassette(tmp_path / "tape", "replay"))
    with dspy.context(lm=player), CostMeter() as meter, pytest.raises(LMFailure) as replayed, lm_failures():
        dspy.Predict(Answer)(question="alpha")
    assert recorded.value.kind == replayed.value.kind == "timeout"
    assert replayed.value.message == recorded.value.message
    assert engine.calls == 0
    assert [(r.replayed, r.failure) for r in meter.records] == [(True, "timeout")]


def test_a_recorded_answer_replaces_a_recorded_failure(tmp_path):
    from reflect_sql.lm.client import ReflectLM

    tape = Cassette(tmp_path / "tape", "record")
    failing = ReflectLM("scripted/lm", engine=TimingOutEngine(), cache=False, num_retries=0, cassette=tape)
    with dspy.context(lm=failing), pytest.raises(LMFailure), lm_failures():
        dspy.Predict(Answer)(question="alpha")
    answering = ScriptedLM(_answers, cassette=tape)
    with dspy.context(lm=answering):
        answer = dspy.Predict(Answer)(question="alpha").answer
    with dspy.context(lm=failing), pytest.raises(LMFailure), lm_failures():
        dspy.Predict(Answer)(question="alpha")  # a later failure does not overwrite the answer
    player = ScriptedLM([], cassette=Cassette(tmp_path / "tape", "replay"))
    with dspy.context(lm=player):
        assert dspy.Predict(Answer)(question="alpha").answer == answer == "ahpla"
