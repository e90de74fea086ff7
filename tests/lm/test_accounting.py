"""Per-call records, aggregated per question and per run, across threads, with cache hits."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from reflect_sql.lm.accounting import CostMeter, lm_scope
from reflect_sql.lm.adapters import CountingChatAdapter
from reflect_sql.lm.failures import LMFailure, lm_failures
from reflect_sql.lm.scripted import ScriptedLM


class GenerateSQL(dspy.Signature):
    """Write SQL."""

    question: str = dspy.InputField()
    sql: str = dspy.OutputField()


class JudgeSQL(dspy.Signature):
    """Judge SQL."""

    sql: str = dspy.InputField()
    score: int = dspy.OutputField(ge=1, le=10)


def _script(name, inputs):
    if name == "GenerateSQL":
        return {"sql": f"SELECT '{inputs['question']}'"}
    return {"score": 7}


def test_records_scope_predictor_tokens_and_totals():
    lm = ScriptedLM(_script, role="generator")
    generate, judge = dspy.Predict(GenerateSQL), dspy.Predict(JudgeSQL)
    with dspy.context(lm=lm), CostMeter() as meter:
        with lm_scope("synthesis.generator"):
            sql = generate(question="q1").sql
        with lm_scope("synthesis.judge"):
            judge(sql=sql)
            judge(sql=sql + " ")
    records = meter.records
    assert [(r.scope, r.predictor, r.role) for r in records] == [
        ("synthesis.generator", "GenerateSQL", "generator"),
        ("synthesis.judge", "JudgeSQL", "generator"),
        ("synthesis.judge", "JudgeSQL", "generator"),
    ]
    assert all(r.prompt_tokens > 20 and r.completion_tokens > 0 and not r.cache_hit for r in records)
    summary = meter.summary()
    assert summary["lm_calls"] == 3
    assert summary["prompt_tokens"] == sum(r.prompt_tokens for r in records)
    assert summary["completion_tokens"] == sum(r.completion_tokens for r in records)
    assert summary["by_scope"]["synthesis.judge"]["lm_calls"] == 2
    assert summary["by_scope"]["synthesis.generator"]["prompt_tokens"] == records[0].prompt_tokens
    assert set(summary) >= {"lm_calls", "prompt_tokens", "completion_tokens", "seconds", "cache_hits", "by_scope"}


def test_cache_hits_are_counted_and_bill_no_tokens():
    lm = ScriptedLM(_script, cache=True)
    judge = dspy.Predict(JudgeSQL)
    with dspy.context(lm=lm), CostMeter() as meter:
        judge(sql="SELECT 1")
        judge(sql="SELECT 1")
        judge(sql="SELECT 2")
    assert len(lm.calls) == 2  # the repeated prompt never reached the script
    hits = [r.cache_hit for r in meter.records]
    assert hits == [False, True, False]
    summary = meter.summary()
    assert summary["cache_hits"] == 1 and summary["lm_calls"] == 3
    assert meter.records[1].prompt_tokens == 0
    assert summary["prompt_tokens"] == meter.records[0].prompt_tokens + meter.records[2].prompt_tokens


def test_nested_meters_per_question_and_per_run():
    lm = ScriptedLM(_script)
    generate = dspy.Predict(GenerateSQL)
    per_question = {}
    with dspy.context(lm=lm), CostMeter("run") as run:
        for q in ("a", "b", "c"):
            with CostMeter(q) as meter:
                generate(question=q)
                if q == "b":
                    generate(question=q + "!")
            per_question[q] = meter.summary()["lm_calls"]
        generate(question="outside any question")
    assert per_question == {"a": 1, "b": 2, "c": 1}
    assert run.summary()["lm_calls"] == 5


def test_threads_each_with_their_own_meter_and_a_shared_run_meter():
    lm = ScriptedLM(_script)
    generate = dspy.Predict(GenerateSQL)
    run = CostMeter("run")

    def one_question(i):
        with dspy.context(lm=lm), run, CostMeter(f"q{i}") as meter:
            for j in range(i % 3 + 1):
                generate(question=f"q{i}-{j}")
        return i, meter.summary()["lm_calls"], {r.predictor for r in meter.records}

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(one_question, range(12)))
    assert all(calls == i % 3 + 1 and preds == {"GenerateSQL"} for i, calls, preds in results)
    assert run.summary()["lm_calls"] == sum(i % 3 + 1 for i in range(12))


def test_meters_follow_lm_settings_into_dspy_parallel_threads():
    lm = ScriptedLM(_script)
    generate = dspy.Predict(GenerateSQL)
    with dspy.context(lm=lm), CostMeter() as run, lm_scope("parallel"):
        dspy.Parallel(num_threads=4, disable_progress_bar=True)(
            [(generate, {"question": f"q{i}"}) for i in range(8)]
        )
    summary = run.summary()
    assert summary["lm_calls"] == 8
    assert list(summary["by_scope"]) == ["parallel"]


def test_calls_outside_any_meter_are_not_collected():
    lm = ScriptedLM(_script)
    with dspy.context(lm=lm):
        dspy.Predict(GenerateSQL)(question="x")
    with CostMeter() as meter:
        pass
    assert meter.summary()["lm_calls"] == 0


def test_adapter_fallback_is_counted():
    # The first reply has no field markers, so ChatAdapter falls back to JSONAdapter (a second call).
    lm = ScriptedLM(["no markers here", {"score": 4}])
    with dspy.context(lm=lm, adapter=CountingChatAdapter()), CostMeter() as meter:
        assert dspy.Predict(JudgeSQL)(sql="SELECT 1").score == 4
    summary = meter.summary()
    assert summary["adapter_fallbacks"] == 1 and summary["lm_calls"] == 2


def test_fallback_turned_off_gives_a_format_failure_and_a_single_call():
    lm = ScriptedLM(["[[ ## score ## ]]\nnot a number\n\n[[ ## completed ## ]]", {"score": 4}])
    adapter = CountingChatAdapter(use_json_adapter_fallback=False)
    with dspy.context(lm=lm, adapter=adapter), CostMeter() as meter:
        with pytest.raises(LMFailure) as err, lm_failures():
            dspy.Predict(JudgeSQL)(sql="SELECT 1")
    assert err.value.kind == "format"
    assert meter.summary()["lm_calls"] == 1 and meter.summary()["adapter_fallbacks"] == 0


def test_async_calls_are_accounted_in_the_callers_meter():
    import asyncio

    lm = ScriptedLM(_script)

    async def run():
        with dspy.context(lm=lm), CostMeter() as meter, lm_scope("async.judge"):
            await asyncio.gather(*(dspy.Predict(JudgeSQL).acall(sql=f"SELECT {i}") for i in range(3)))
        return meter.summary()

    summary = asyncio.run(run())
    assert summary["lm_calls"] == 3 and list(summary["by_scope"]) == ["async.judge"]


class Pipeline(dspy.Module):
    def __init__(self):
        super().__init__()
        self.generate = dspy.ChainOfThought(GenerateSQL)
        self.judge = dspy.Predict("sql -> score: int")

    def forward(self, question):
        sql = self.generate(question=question).sql
        return dspy.Prediction(sql=sql, score=self.judge(sql=sql).score)


def test_string_and_chain_of_thought_predictors_are_named_by_attribute():
    lm = ScriptedLM({"generate": {"sql": "SELECT 1"}, "judge": [{"score": 3}, {"score": 8}]})
    with dspy.context(lm=lm), CostMeter() as meter:
        first, second = Pipeline()(question="a"), Pipeline()(question="b")
    assert (first.sql, first.score, second.score) == ("SELECT 1", 3, 8)
    assert [r.predictor for r in meter.records] == ["generate", "judge", "generate", "judge"]
    assert [name for name, _ in lm.calls] == ["generate", "judge", "generate", "judge"]


def test_a_cache_hit_is_also_counted_at_what_it_first_cost(tmp_path):
    from reflect_sql.lm.cost_ledger import CostLedger

    judge = dspy.Predict(JudgeSQL)
    # Two runs sharing one response cache, as two variants of an ablation do.
    first = ScriptedLM(_script, cache=True, ledger=CostLedger(tmp_path))
    with dspy.context(lm=first), CostMeter() as earlier:
        judge(sql="SELECT 'ledger'")
    computed = earlier.records[0]
    assert not computed.cache_hit and computed.prompt_tokens > 20

    second = ScriptedLM(_script, cache=True, ledger=CostLedger(tmp_path))  # a new process reads the file
    with dspy.context(lm=second), CostMeter() as later:
        judge(sql="SELECT 'ledger'")
        judge(sql="SELECT 'ledger, new'")
    hit, fresh = later.records
    assert hit.cache_hit and hit.prompt_tokens == 0
    assert hit.first_cost.prompt_tokens == computed.prompt_tokens
    assert hit.first_cost.completion_tokens == computed.completion_tokens
    assert hit.first_cost.seconds == pytest.approx(computed.seconds, abs=1e-3)
    summary = later.summary()
    assert summary["prompt_tokens"] == fresh.prompt_tokens
    assert summary["alone_prompt_tokens"] == fresh.prompt_tokens + computed.prompt_tokens
    assert summary["alone_completion_tokens"] == fresh.completion_tokens + computed.completion_tokens
    assert summary["cache_hits_of_unknown_cost"] == 0


def test_a_cache_hit_computed_before_the_ledger_is_of_unknown_cost(tmp_path):
    from reflect_sql.lm.cost_ledger import CostLedger

    judge = dspy.Predict(JudgeSQL)
    with dspy.context(lm=ScriptedLM(_script, cache=True)):
        judge(sql="SELECT 'before the ledger'")
    with dspy.context(lm=ScriptedLM(_script, cache=True, ledger=CostLedger(tmp_path))), CostMeter() as meter:
        judge(sql="SELECT 'before the ledger'")
    summary = meter.summary()
    assert summary["cache_hits"] == 1 and summary["cache_hits_of_unknown_cost"] == 1
    assert summary["alone_prompt_tokens"] == 0
