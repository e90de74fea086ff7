"""Each ablation switch removes exactly its loop; enrichment happens only after a fully verified answer."""
import pytest

from paper_settings import Settings

GOOD = "SELECT name, CAST(returns AS REAL) / orders AS return_rate FROM stores WHERE orders > 0"
TYPO = "SELECT nme, CAST(returns AS REAL) / orders AS return_rate FROM stores WHERE orders > 0"

# One question on which every loop acts: a typo for the syntax loop, then passing judges.
BASE_CALLS = {"RetrievalJudge": 1, "GenerateSQL": 1, "RepairSQL": 1, "SemanticJudge": 1, "EntailmentJudge": 1}
# The typo also gets schema-grounded repair's closest names ("name") before the repairer's call.
BASE_LOOPS = {"retrieval", "synthesis.generate", "synthesis.syntax", "synthesis.schema_repair", "synthesis.semantic",
              "entailment", "result", "enrichment"}


def script(helpers):
    return helpers.Script(GenerateSQL={"sql": TYPO}, RepairSQL={"repaired_sql": GOOD})


def test_full_program_runs_every_loop_once(run, helpers, retriever):
    pred, lm = run(script(helpers))
    assert helpers.calls_by_signature(lm) == BASE_CALLS
    assert {s["loop"] for s in pred.trace} == BASE_LOOPS
    assert len(retriever.enriched) == 1
    assert all(v is not None for v in pred.scores.values())


@pytest.mark.parametrize(
    "switches, removed_calls, removed_loops, added_loops, removed_scores",
    [
        ({"use_retrieval_loop": False}, {"RetrievalJudge"}, set(), set(), {"retrieval"}),
        ({"use_semantic_reflection": False}, {"SemanticJudge"}, {"synthesis.semantic"}, set(), {"semantic"}),
        ({"use_entailment": False}, {"EntailmentJudge"}, {"entailment"}, {"execution"}, {"entailment"}),
        ({"use_enrichment": False}, set(), set(), set(), set()),
    ],
)
def test_each_switch_removes_exactly_its_loop(run, helpers, retriever, switches, removed_calls, removed_loops,
                                              added_loops, removed_scores):
    pred, lm = run(script(helpers), Settings(**switches))
    expected = {k: v for k, v in BASE_CALLS.items() if k not in removed_calls}
    assert helpers.calls_by_signature(lm) == expected
    assert {s["loop"] for s in pred.trace} == (BASE_LOOPS - removed_loops) | added_loops
    assert pred.sql == GOOD and [tuple(r) for r in pred.rows] == [("North", 0.3), ("East", 0.25)]
    assert {k for k, v in pred.scores.items() if v is None} == removed_scores
    if "use_retrieval_loop" in switches:
        assert steps(pred, "retrieval")[0]["decision"] == "retrieved once (retrieval loop off)"
    # Nothing unverified is learnt: without entailment (or with enrichment off) the KB is untouched.
    enriched = not ({"use_entailment", "use_enrichment"} & set(switches))
    assert len(retriever.enriched) == int(enriched)
    assert steps(pred, "enrichment")[0]["decision"].startswith("enriched" if enriched else "skipped")


def test_without_syntax_reflection_nothing_is_compiled_or_repaired(run, helpers):
    # The typo now reaches execution, fails there, and entailment sends it back: the syntax loop
    # is gone, the other loops stay and do their own work.
    pred, lm = run(helpers.Script(GenerateSQL=[{"sql": TYPO}, {"sql": GOOD}]), Settings(use_syntax_reflection=False))
    counts = helpers.calls_by_signature(lm)
    assert "RepairSQL" not in counts
    assert not steps(pred, "synthesis.syntax")
    assert steps(pred, "entailment")[0]["inputs"]["checks"][0]["check"] == "execution_error"
    assert pred.sql == GOOD


def test_no_sql_reflection_removes_both_synthesis_sub_loops(run, helpers):
    pred, lm = run(helpers.Script(GenerateSQL={"sql": GOOD}),
                   Settings(use_syntax_reflection=False, use_semantic_reflection=False))
    assert helpers.calls_by_signature(lm) == {"RetrievalJudge": 1, "GenerateSQL": 1, "EntailmentJudge": 1}
    assert not steps(pred, "synthesis.syntax") and not steps(pred, "synthesis.semantic")


def test_single_pass_retrieves_once_generates_once_and_judges_nothing(run, helpers, retriever):
    pred, lm = run(helpers.Script(GenerateSQL={"sql": GOOD}), mode="single-pass")
    assert helpers.calls_by_signature(lm) == {"GenerateSQL": 1}
    assert len(retriever.requests) == 1 and not retriever.enriched
    assert [s["loop"] for s in pred.trace] == ["retrieval", "synthesis.generate", "execution"]
    assert pred.scores == {"retrieval": None, "semantic": None, "entailment": None}
    assert [tuple(r) for r in pred.rows] == [("North", 0.3), ("East", 0.25)]
    assert pred.cost["lm_calls"] == 1


def test_single_pass_reports_execution_errors(run, helpers):
    pred, _ = run(helpers.Script(GenerateSQL={"sql": TYPO}), mode="single-pass")
    assert pred.sql == TYPO and pred.rows == [] and pred.columns == []
    assert "nme" in pred.error


# --- enrichment ----------------------------------------------------------------------------

def steps(pred, loop):
    return [s for s in pred.trace if s["loop"] == loop]


def test_success_enriches_the_kb_with_the_verified_answer(run, helpers, retriever):
    pred, _ = run(helpers.Script(GenerateSQL={"sql": GOOD}))
    (call,) = retriever.enriched
    assert call["question"] == "What is the return rate of each store?" and call["sql"] == GOOD
    assert call["result"].rows == [("North", 0.3), ("East", 0.25)]
    judgments = call["judgments"]
    assert judgments["retrieval"] == {"score": pred.scores["retrieval"], "threshold": 4.0}
    assert judgments["semantic"] == {"score": pred.scores["semantic"], "threshold": 5.0}
    assert judgments["entailment"] == {"score": pred.scores["entailment"], "threshold": 3.0}
    assert judgments["compiles"] == judgments["executes"] == {"passed": True}
    checks = {k: v for k, v in judgments.items() if k.startswith("check.")}
    assert {"check.integer_division", "check.division_by_zero", "check.empty_result"} <= set(checks)
    assert all(v == {"passed": True} for v in checks.values())
    (step,) = steps(pred, "enrichment")
    assert step["decision"] == "enriched" and step["rewrite"] == {"version": 1}


def test_a_warning_check_bars_enrichment_even_when_entailed(run, helpers, retriever):
    # The judge is satisfied, but "how many" with three rows is a finding: not a verified example.
    pred, _ = run(helpers.Script(GenerateSQL={"sql": "SELECT name FROM stores"}), question="How many stores are there?")
    (entail,) = steps(pred, "entailment")
    assert entail["decision"] == "accept" and [c["check"] for c in entail["inputs"]["checks"]] == ["result_too_large"]
    assert not retriever.enriched
    assert steps(pred, "enrichment")[0]["decision"].startswith("skipped")


def test_a_failed_check_never_enriches_even_at_the_cap(run, helpers, retriever):
    naive = "SELECT name, returns / orders AS return_rate FROM stores"
    pred, _ = run(helpers.Script(GenerateSQL={"sql": naive}), Settings(max_entailment_iterations=2))
    assert pred.sql == naive  # the best there was
    assert not retriever.enriched


def test_a_semantic_judgment_below_threshold_bars_enrichment(run, helpers, retriever):
    settings = Settings(max_semantic_iterations=1)
    pred, _ = run(helpers.Script(GenerateSQL={"sql": GOOD}, SemanticJudge=helpers.semantic(2)), settings)
    assert pred.scores["entailment"] == 5.0 and pred.scores["semantic"] == 2.0
    assert not retriever.enriched


def test_the_program_decides_verified_only_by_the_one_policy(run, helpers, retriever, monkeypatch):
    # Every judge and check passes here, so only the policy's verdict can bar the enrichment.
    from reflect_sql.programs import reflect_sql as program

    asked = []
    monkeypatch.setattr(program, "fully_verified", lambda c, settings: asked.append(c.sql) or False)
    pred, _ = run(helpers.Script(GenerateSQL={"sql": GOOD}))
    assert asked == [GOOD] and pred.sql == GOOD
    assert not retriever.enriched
    assert steps(pred, "enrichment")[0]["decision"].startswith("skipped")


def _answer_with(engine, retriever, helpers):
    import dspy

    from reflect_sql.programs import build_program

    lm = helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": GOOD}))
    with dspy.context(lm=lm):
        return build_program(Settings(), engine, retriever)(question="What is the return rate of each store?")


def test_a_failing_kb_costs_nothing_but_the_enrichment(engine, helpers):
    broken = helpers.RecordingRetriever(engine.introspect(), enrich_error=OSError("disk full"))
    pred = _answer_with(engine, broken, helpers)
    (step,) = steps(pred, "enrichment")
    assert step["decision"] == "enrichment failed" and step["failure"] == "OSError: disk full"
    assert pred.sql == GOOD and pred.rows


def test_a_kb_refusal_is_recorded_with_its_reasons(engine, helpers):
    class Refusing(helpers.RecordingRetriever):
        def enrich(self, question, sql, result, judgments):
            return {"accepted": False, "reasons": ["the SQL does not resolve against the KB's schema"]}

    pred = _answer_with(engine, Refusing(engine.introspect()), helpers)
    (step,) = steps(pred, "enrichment")
    assert step["decision"] == "refused by the KB"
    assert step["failure"] == "the SQL does not resolve against the KB's schema"
    assert pred.sql == GOOD


def test_without_a_kb_enrichment_is_skipped(engine, helpers):
    import dspy

    from reflect_sql.programs import build_program

    lm = helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": GOOD}))
    with dspy.context(lm=lm):
        pred = build_program(Settings(), engine)(question="What is the return rate of each store?")
    assert steps(pred, "enrichment")[0]["decision"] == "skipped: no knowledge base to enrich"


# --- role isolation and cost ---------------------------------------------------------------

def test_judges_run_on_the_judge_lm_and_the_generator_on_its_own(engine, retriever, helpers):
    import dspy

    from reflect_sql.programs import build_program

    generator = helpers.ScriptedLM(helpers.Script(GenerateSQL={"sql": TYPO}, RepairSQL={"repaired_sql": GOOD}), model="scripted/gen")
    judge = helpers.ScriptedLM(helpers.Script(), model="scripted/judge")
    ambient = helpers.ScriptedLM(helpers.Script())
    with dspy.context(lm=ambient):
        pred = build_program(Settings(), engine, retriever, generator_lm=generator, judge_lm=judge)(
            question="What is the return rate of each store?")
    assert set(helpers.calls_by_signature(generator)) == {"GenerateSQL", "RepairSQL"}
    assert set(helpers.calls_by_signature(judge)) == {"RetrievalJudge", "SemanticJudge", "EntailmentJudge"}
    assert ambient.calls == []
    assert pred.sql == GOOD


def test_cost_adds_up_over_the_trace(run, helpers):
    pred, lm = run(script(helpers))
    assert set(pred.cost) == {"lm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "seconds"}
    assert pred.cost["lm_calls"] == len(lm.calls) == 5
    step_costs = [s["cost"] for s in pred.trace if s["cost"]]
    assert sum(c["lm_calls"] for c in step_costs) == pred.cost["lm_calls"]
    assert sum(c["prompt_tokens"] for c in step_costs) == pred.cost["prompt_tokens"] > 0
    assert sum(c["completion_tokens"] for c in step_costs) == pred.cost["completion_tokens"] > 0
    assert pred.cost["seconds"] >= 0
