"""Every branch of the three loops, driven by a scripted LM on a tiny SQLite database."""
import sqlite3

import pytest

from paper_settings import Settings

GOOD = "SELECT name, CAST(returns AS REAL) / orders AS return_rate FROM stores WHERE orders > 0"
ALSO_GOOD = "SELECT name, returns * 1.0 / orders AS rate FROM stores WHERE orders > 0"
COUNT_Q = "How many stores are there?"
COUNT_SQL = "SELECT COUNT(*) FROM stores"


def steps(pred, loop):
    return [s for s in pred.trace if s["loop"] == loop]


# --- loop 1: retrieval ---------------------------------------------------------------------

def test_low_retrieval_score_rewrites_the_question_and_widens_k_and_m(run, retriever, helpers):
    settings = Settings(alpha=0.5, k_tables=2, m_columns=3, k_growth=3, m_growth=5, theta_r=6)
    script = helpers.Script(
        RetrievalJudge=[helpers.retrieval(3, 2, rewritten="store names with orders and returns counts",
                                          missing=["no returns column"]),
                        helpers.retrieval(8, 7)],
        GenerateSQL={"sql": GOOD},
    )
    pred, lm = run(script, settings)
    assert retriever.requests == [
        ("What is the return rate of each store?", 2, 3),
        ("store names with orders and returns counts", 5, 8),
    ]
    first, second = steps(pred, "retrieval")
    assert first["decision"] == "rewrite and widen"
    assert first["scores"]["score"] == pytest.approx(0.5 * 3 + 0.5 * 2)
    assert first["rewrite"] == {"query": "store names with orders and returns counts", "k": 5, "m": 8}
    assert first["feedback"] == "no returns column"
    assert second["decision"] == "accept"
    assert pred.scores["retrieval"] == pytest.approx(0.5 * 8 + 0.5 * 7)
    # The judge always sees the user's question, not the retrieval query.
    assert all(i["question"] == "What is the return rate of each store?" for i in helpers.inputs_of(lm, "RetrievalJudge"))


def test_retrieval_cap_keeps_the_best_context_and_goes_on(run, retriever, helpers):
    settings = Settings(max_retrieval_iterations=3, theta_r=8, k_tables=4, m_columns=8, k_growth=2, m_growth=4)
    script = helpers.Script(
        RetrievalJudge=[helpers.retrieval(3, 3, "q2"), helpers.retrieval(6, 6, "q3"), helpers.retrieval(2, 2, "q4")],
        GenerateSQL={"sql": GOOD},
    )
    pred, lm = run(script, settings)
    assert helpers.calls_by_signature(lm)["RetrievalJudge"] == 3
    assert [r[1:] for r in retriever.requests] == [(4, 8), (6, 12), (8, 16)]
    assert steps(pred, "retrieval")[-1]["decision"].startswith("cap reached")
    assert pred.scores["retrieval"] == pytest.approx(6.0)  # the best of 3, 6, 2: not the last
    assert pred.sql == GOOD and pred.rows  # the pipeline carried on


def test_a_widening_that_finds_nothing_new_keeps_the_verdict_without_asking_again(run_static, static_retriever, helpers):
    """The judge reads question, evidence, context and diagnosis: when a wider search returns the
    same context, its prompt is the same, and so would be its verdict."""
    settings = Settings(max_retrieval_iterations=3, theta_r=8, k_tables=4, m_columns=8, k_growth=2, m_growth=4)
    script = helpers.Script(RetrievalJudge=[helpers.retrieval(3, 3, "q2"), helpers.retrieval(9, 9)],
                            GenerateSQL={"sql": GOOD})
    pred, lm = run_static(script, settings)
    assert helpers.calls_by_signature(lm)["RetrievalJudge"] == 1
    assert [r[1:] for r in static_retriever.requests] == [(4, 8), (6, 12), (8, 16)]  # it still widened each time
    first, second, third = steps(pred, "retrieval")
    assert first["cost"]["lm_calls"] == 1 and not second["cost"] and not third["cost"]
    assert second["scores"] == first["scores"] and "verdict reused, no LM call" in second["decision"]
    assert third["decision"].startswith("cap reached") and "verdict reused" in third["decision"]
    assert pred.sql == GOOD


def test_a_failed_judgment_is_asked_again_on_the_same_context(run_static, static_retriever, helpers):
    # A failure is not a verdict (it may be a timeout): the widened, unchanged context is judged anew.
    settings = Settings(json_adapter_fallback=False, max_retrieval_iterations=3, theta_r=8)
    script = helpers.Script(RetrievalJudge=["no idea", helpers.retrieval(9, 9)], GenerateSQL={"sql": GOOD})
    pred, lm = run_static(script, settings)
    assert helpers.calls_by_signature(lm)["RetrievalJudge"] == 2
    first, second = steps(pred, "retrieval")
    assert first["failure"].startswith("retrieval judge failed") and second["decision"] == "accept"


def test_a_rewrite_that_is_sql_keeps_the_query_and_still_widens(run, retriever, helpers):
    """Small models asked for Q' sometimes hand back the failed SQL; searching the KB with it finds
    the tables the wrong SQL named, not those the question needs."""
    settings = Settings(theta_r=6, k_tables=2, m_columns=3, k_growth=1, m_growth=2)
    script = helpers.Script(
        RetrievalJudge=[helpers.retrieval(2, 2, rewritten="```sql\nSELECT s.name FROM stores AS s WHERE s.nope = 1\n```"),
                        helpers.retrieval(8, 8)],
        GenerateSQL={"sql": GOOD},
    )
    pred, lm = run(script, settings)
    question = "What is the return rate of each store?"
    assert retriever.requests == [(question, 2, 3), (question, 3, 5)]
    first = steps(pred, "retrieval")[0]
    assert first["decision"] == "widen (query kept)" and "was SQL" in first["failure"]
    assert first["rewrite"] == {"query": question, "k": 3, "m": 5}


def test_reads_as_sql_tells_statements_from_imperative_questions():
    from reflect_sql.programs.sql_text import reads_as_sql

    assert reads_as_sql("SELECT T1.a FROM t AS T1 JOIN u AS T2 ON T1.id = T2.t_id WHERE T2.b = 'x'")
    assert reads_as_sql("Rewritten question: WITH x AS (SELECT 1 AS a) SELECT a FROM x")
    assert not reads_as_sql("Select the names of heroes from Marvel Comics")
    assert not reads_as_sql("select the heroes who can fly")
    assert not reads_as_sql("Which superpowers does 3-D Man have?")
    assert not reads_as_sql("") and not reads_as_sql(None)


# --- loop 2: synthesis ---------------------------------------------------------------------

def test_syntax_error_is_repaired_from_the_engine_error(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": "SELECT nme, CAST(returns AS REAL) / orders FROM stores WHERE orders > 0"},
                            RepairSQL={"repaired_sql": GOOD})
    pred, lm = run(script)
    repair_inputs = helpers.inputs_of(lm, "RepairSQL")
    assert len(repair_inputs) == 1
    assert "nme" in repair_inputs[0]["error"]  # the engine's own message reached the repairer
    assert [s["decision"] for s in steps(pred, "synthesis.syntax")] == ["repair", "compiles"]
    assert pred.sql == GOOD
    assert [tuple(r) for r in pred.rows] == [("North", 0.3), ("East", 0.25)]


def test_write_sql_is_refused_never_run_and_fed_back_as_an_error(run, db_path, helpers):
    script = helpers.Script(GenerateSQL={"sql": "DELETE FROM stores"}, RepairSQL={"repaired_sql": GOOD})
    pred, lm = run(script)
    (repair,) = helpers.inputs_of(lm, "RepairSQL")
    assert repair["error"].startswith("refused")
    assert pred.sql == GOOD
    assert sqlite3.connect(db_path).execute("SELECT COUNT(*) FROM stores").fetchone() == (3,)


def test_refused_sql_without_syntax_reflection_reaches_entailment_as_an_error(run, db_path, helpers):
    settings = Settings(use_syntax_reflection=False, max_entailment_iterations=2)
    script = helpers.Script(GenerateSQL=[{"sql": "DROP TABLE stores"}, {"sql": GOOD}])
    pred, lm = run(script, settings)
    first = steps(pred, "entailment")[0]
    assert first["inputs"]["checks"][0]["check"] == "execution_error"
    assert "refused" in first["feedback"]
    assert "refused" in helpers.inputs_of(lm, "GenerateSQL")[1]["feedback"]
    assert pred.sql == GOOD
    assert sqlite3.connect(db_path).execute("SELECT COUNT(*) FROM stores").fetchone() == (3,)


def test_low_semantic_score_regenerates_with_the_diagnosis(run, helpers):
    weak = "SELECT name, returns FROM stores"
    settings = Settings(theta_s=6)
    script = helpers.Script(
        GenerateSQL=[{"sql": weak}, {"sql": GOOD}],
        SemanticJudge=[helpers.semantic((8, 3, 9, 2), diagnosis="returns must be divided by orders"),
                       helpers.semantic(9)],
    )
    pred, lm = run(script, settings)
    gen = helpers.inputs_of(lm, "GenerateSQL")
    assert len(gen) == 2
    assert "returns must be divided by orders" in gen[1]["feedback"] and weak in gen[1]["feedback"]
    first, second = steps(pred, "synthesis.semantic")
    s_first = 0.1 * 8 + 0.3 * 3 + 0.4 * 9 + 0.2 * 2
    assert first["scores"]["S"] == pytest.approx(s_first) and first["decision"] == "regenerate with the diagnosis"
    assert second["decision"] == "accept"
    assert pred.sql == GOOD and pred.scores["semantic"] == pytest.approx(9.0)


def test_semantic_weights_come_from_settings(run, helpers):
    settings = Settings(w_c=0.7, w_g=0.1, w_j=0.1, w_q=0.1, theta_s=1)
    script = helpers.Script(GenerateSQL={"sql": GOOD}, SemanticJudge=helpers.semantic((10, 2, 4, 6)))
    pred, _ = run(script, settings)
    assert pred.scores["semantic"] == pytest.approx(0.7 * 10 + 0.1 * 2 + 0.1 * 4 + 0.1 * 6)


def test_syntax_cap_keeps_failing_sql_and_reports_the_error(run, helpers):
    settings = Settings(max_syntax_repairs=2, max_semantic_iterations=1, max_entailment_iterations=1)
    broken = "SELECT nosuch FROM stores"
    script = helpers.Script(GenerateSQL={"sql": broken}, RepairSQL=[{"repaired_sql": "SELECT wrong FROM stores"},
                                                                    {"repaired_sql": "SELECT stillwrong FROM stores"}])
    pred, lm = run(script, settings)
    counts = helpers.calls_by_signature(lm)
    assert counts["RepairSQL"] == 2
    assert "SemanticJudge" not in counts  # nothing to judge in SQL that does not compile
    syntax = steps(pred, "synthesis.syntax")
    assert len(syntax) == 3 and syntax[-1]["decision"].startswith("cap reached")
    assert pred.sql == "SELECT stillwrong FROM stores"
    assert pred.error and "stillwrong" in pred.error
    assert pred.rows == [] and pred.scores["entailment"] == 1.0


def test_semantic_cap_returns_the_best_scoring_candidate(run, helpers):
    settings = Settings(max_semantic_iterations=3, theta_s=9, use_entailment=False)
    sqls = ["SELECT name FROM stores", ALSO_GOOD, "SELECT id FROM stores"]
    script = helpers.Script(GenerateSQL=[{"sql": s} for s in sqls],
                            SemanticJudge=[helpers.semantic(3), helpers.semantic(7), helpers.semantic(2)])
    pred, lm = run(script, settings)
    assert helpers.calls_by_signature(lm)["GenerateSQL"] == 3
    assert steps(pred, "synthesis.semantic")[-1]["decision"].startswith("cap reached")
    assert pred.sql == ALSO_GOOD and pred.scores["semantic"] == pytest.approx(7.0)
    assert [tuple(r) for r in pred.rows] == [("North", 0.3), ("East", 0.25)]


# --- loop 3: entailment --------------------------------------------------------------------

def test_low_entailment_goes_back_to_retrieval_with_the_diagnosis(run, retriever, helpers):
    script = helpers.Script(
        GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": GOOD}],
        EntailmentJudge=[helpers.entailment(2, 2, diagnosis="name the column return_rate"), helpers.entailment(5, 5)],
    )
    pred, lm = run(script)
    judge_inputs = helpers.inputs_of(lm, "RetrievalJudge")
    assert len(judge_inputs) == 2 and len(retriever.requests) == 2
    assert judge_inputs[0]["diagnosis"] == "" and "name the column return_rate" in judge_inputs[1]["diagnosis"]
    assert "name the column return_rate" in helpers.inputs_of(lm, "GenerateSQL")[1]["feedback"]
    assert [s["round"] for s in steps(pred, "entailment")] == [0, 1]
    assert steps(pred, "entailment")[0]["scores"]["E"] == pytest.approx(0.2 * 2 + 0.8 * 2)
    assert pred.sql == GOOD and pred.scores["entailment"] == pytest.approx(5.0)


def test_entailment_beta_comes_from_settings(run, helpers):
    settings = Settings(beta=0.75, theta_e=1)
    script = helpers.Script(GenerateSQL={"sql": GOOD}, EntailmentJudge=helpers.entailment(4, 2))
    pred, _ = run(script, settings)
    assert pred.scores["entailment"] == pytest.approx(0.75 * 4 + 0.25 * 2)


def test_entailment_cap_returns_the_best_candidate_with_its_scores_and_rows(run, helpers):
    settings = Settings(max_entailment_iterations=3)
    sqls = ["SELECT name FROM stores", ALSO_GOOD, "SELECT id FROM stores"]
    script = helpers.Script(
        GenerateSQL=[{"sql": s} for s in sqls],
        EntailmentJudge=[helpers.entailment(2, 2), helpers.entailment(3, 2), helpers.entailment(1, 1, "wrong column")],
    )
    pred, lm = run(script, settings)
    counts = helpers.calls_by_signature(lm)
    assert counts["EntailmentJudge"] == 3 and counts["RetrievalJudge"] == 3 and counts["GenerateSQL"] == 3
    assert pred.sql == ALSO_GOOD
    assert pred.scores == {"retrieval": 9.0, "semantic": 9.0, "entailment": pytest.approx(0.2 * 3 + 0.8 * 2)}
    assert [tuple(r) for r in pred.rows] == [("North", 0.3), ("East", 0.25)]
    assert pred.columns == ["name", "rate"] and pred.error is None
    assert steps(pred, "result")[-1]["decision"].startswith("cap reached")


def test_error_checks_pull_e_data_to_the_bottom_whatever_the_judge_says(run, helpers):
    settings = Settings(max_entailment_iterations=1)
    script = helpers.Script(GenerateSQL={"sql": "SELECT r.name FROM stores s JOIN regions r ON r.id = s.region_id"},
                            EntailmentJudge=helpers.entailment(5, 5))
    pred, _ = run(script, settings, question="List the distinct regions that have stores.")
    (step,) = steps(pred, "entailment")
    assert [c["check"] for c in step["inputs"]["checks"]] == ["duplicate_rows"]
    assert step["scores"]["E_data_judge"] == 5 and step["scores"]["E_data"] == 1
    assert pred.scores["entailment"] == pytest.approx(0.2 * 5 + 0.8 * 1)


def test_warning_checks_inform_the_judge_but_leave_its_score(run, helpers, retriever):
    script = helpers.Script(GenerateSQL={"sql": "SELECT name FROM stores WHERE name = 'Nowhere'"},
                            EntailmentJudge=helpers.entailment(5, 4))
    pred, lm = run(script, question="Which stores are called Nowhere?")
    (step,) = steps(pred, "entailment")
    assert step["inputs"]["checks"] == [{"check": "empty_result", "severity": "warning",
                                         "message": "the query returned no rows; check filter values, joins and literals"}]
    assert "empty_result" in helpers.inputs_of(lm, "EntailmentJudge")[0]["check_findings"]
    assert step["scores"]["E_data"] == 4 and step["decision"] == "accept"
    assert pred.rows == [] and not retriever.enriched  # an answer, but not a verified example


# --- bad LM output -------------------------------------------------------------------------

def test_garbage_from_a_judge_is_a_recorded_failure_not_a_crash(run, helpers):
    settings = Settings(max_semantic_iterations=2, json_adapter_fallback=False)
    script = helpers.Script(GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": GOOD}],
                            SemanticJudge=["I think it is fine!!", helpers.semantic(9)])
    pred, _ = run(script, settings)
    first = steps(pred, "synthesis.semantic")[0]
    assert first["failure"].startswith("semantic judge failed") and first["decision"] == "regenerate"
    assert pred.sql == GOOD and pred.scores["semantic"] == 9.0


def test_out_of_scale_score_is_retried_once_through_the_other_adapter(run, helpers):
    script = helpers.Script(GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": GOOD}],
                            EntailmentJudge=[helpers.entailment(5, 9), helpers.entailment(5, 5)])
    pred, lm = run(script, Settings(max_entailment_iterations=2, json_adapter_fallback=False))
    first = steps(pred, "entailment")[0]
    assert first["retry"] == "e_data=9 is not an integer from 1 to 5"
    assert first["failure"] is None and first["decision"] == "accept"
    assert first["cost"]["lm_calls"] == 2  # the retry is paid for and shows
    assert helpers.calls_by_signature(lm)["EntailmentJudge"] == 2
    assert pred.sql == ALSO_GOOD and pred.scores["entailment"] == 5.0


def test_a_reply_out_of_scale_twice_is_a_judgment_failure(run, helpers):
    script = helpers.Script(GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": GOOD}],
                            EntailmentJudge=[helpers.entailment(5, 9), helpers.entailment(0, 5), helpers.entailment(5, 5)])
    pred, _ = run(script, Settings(max_entailment_iterations=2, json_adapter_fallback=False))
    first = steps(pred, "entailment")[0]
    assert "entailment judge failed (judgment: e_schema=0 is not an integer from 1 to 5" in first["failure"]
    assert pred.scores["entailment"] == 5.0


@pytest.mark.parametrize("judge", ["SemanticJudge", "EntailmentJudge"])
def test_bottom_scores_with_no_diagnosis_contradict_themselves_and_are_asked_again(run, helpers, judge):
    contradiction = helpers.semantic(1) if judge == "SemanticJudge" else helpers.entailment(1, 1)
    coherent = helpers.semantic(9) if judge == "SemanticJudge" else helpers.entailment(5, 5)
    script = helpers.Script(GenerateSQL={"sql": GOOD}, **{judge: [contradiction, coherent]})
    pred, lm = run(script, Settings())
    loop = "synthesis.semantic" if judge == "SemanticJudge" else "entailment"
    step = steps(pred, loop)[0]
    assert step["retry"].startswith("self-contradiction: every score at the bottom")
    assert step["decision"] == "accept"
    assert helpers.calls_by_signature(lm)[judge] == 2


def test_bottom_scores_with_a_reason_are_a_judgment(run, helpers):
    script = helpers.Script(GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": GOOD}],
                            EntailmentJudge=[helpers.entailment(1, 1, "the rows are per store, not per region"),
                                             helpers.entailment(5, 5)])
    pred, lm = run(script, Settings(max_entailment_iterations=2))
    first = steps(pred, "entailment")[0]
    assert first["retry"] is None and first["scores"]["E"] == 1.0
    assert "per store, not per region" in first["feedback"]


def test_retrieval_judge_rejecting_with_nothing_missing_is_asked_again(run, helpers):
    script = helpers.Script(RetrievalJudge=[helpers.retrieval(1, 1), helpers.retrieval(9, 9)], GenerateSQL={"sql": GOOD})
    pred, lm = run(script, Settings())
    first = steps(pred, "retrieval")[0]
    assert first["retry"].startswith("self-contradiction") and first["scores"]["score"] == 9.0


def test_retrieval_judge_failure_widens_like_a_low_score(run, retriever, helpers):
    script = helpers.Script(RetrievalJudge=["no idea", helpers.retrieval(9, 9)], GenerateSQL={"sql": GOOD})
    pred, _ = run(script, Settings(json_adapter_fallback=False, k_tables=4, m_columns=8, k_growth=2, m_growth=4))
    first = steps(pred, "retrieval")[0]
    assert first["failure"].startswith("retrieval judge failed") and first["decision"] == "widen (query kept)"
    assert [r[1:] for r in retriever.requests] == [(4, 8), (6, 12)]
    assert retriever.requests[1][0] == retriever.requests[0][0]  # no Q' without a judgment


def test_a_generator_that_never_writes_sql_gives_an_answer_with_an_error(run, helpers):
    settings = Settings(max_semantic_iterations=2, max_entailment_iterations=2)
    script = helpers.Script(GenerateSQL=["Sorry, I cannot help with that."])
    pred, lm = run(script, settings)
    assert pred.sql is None and pred.rows == [] and pred.columns == []
    assert pred.error == "no SQL could be generated"
    assert pred.scores == {"retrieval": None, "semantic": None, "entailment": None}
    assert helpers.calls_by_signature(lm)["GenerateSQL"] >= 4  # 2 rounds x 2 generations (+ adapter retries)
    assert all(s["failure"] for s in steps(pred, "synthesis.generate"))


def test_fenced_sql_from_the_generator_is_unwrapped(run, helpers):
    script = helpers.Script(GenerateSQL={"sql": f"```sql\n{GOOD};\n```"})
    pred, _ = run(script)
    assert pred.sql == GOOD


def test_a_generator_that_repeats_itself_stops_the_semantic_loop(run, helpers):
    settings = Settings(max_semantic_iterations=4, theta_s=9, use_entailment=False)
    script = helpers.Script(GenerateSQL={"sql": ALSO_GOOD}, SemanticJudge=helpers.semantic(6))
    pred, lm = run(script, settings)
    counts = helpers.calls_by_signature(lm)
    # The second generation repeats, then samples max_resamples times and still repeats: stop.
    assert counts["GenerateSQL"] == 2 + settings.max_resamples and counts["SemanticJudge"] == 1
    last = steps(pred, "synthesis.generate")[-1]
    assert last["decision"].startswith("repeated an earlier SQL")
    assert last["scores"] == {"repeats": 1 + settings.max_resamples, "samples": settings.max_resamples}
    assert pred.sql == ALSO_GOOD and pred.scores["semantic"] == pytest.approx(6.0)


def test_a_sql_already_rejected_by_entailment_is_not_judged_again(run, helpers, retriever):
    """Same SQL, same result, same judge inputs: a second round on it would only repeat the verdict."""
    naive = "SELECT name, returns / orders AS return_rate FROM stores"
    pred, lm = run(helpers.Script(GenerateSQL={"sql": naive}), Settings(max_entailment_iterations=3))
    counts = helpers.calls_by_signature(lm)
    settings = Settings(max_entailment_iterations=3)
    assert counts["EntailmentJudge"] == 1 and counts["GenerateSQL"] == 2 + settings.max_resamples
    assert counts["RetrievalJudge"] == 2
    assert steps(pred, "result")[-1]["decision"].startswith("the generator repeated the SQL rejected in round 0")
    assert pred.sql == naive and pred.scores["entailment"] == pytest.approx(1.8) and pred.rows
    assert not retriever.enriched


def test_a_repairer_that_repeats_the_sql_stops_the_syntax_loop(run, helpers):
    broken = "SELECT nosuch FROM stores"
    settings = Settings(max_syntax_repairs=3, max_semantic_iterations=2)
    script = helpers.Script(GenerateSQL=[{"sql": broken}, {"sql": GOOD}], RepairSQL={"repaired_sql": broken})
    pred, lm = run(script, settings)
    assert helpers.calls_by_signature(lm)["RepairSQL"] == 1
    first = steps(pred, "synthesis.syntax")[0]
    assert first["decision"] == "repairer returned the same SQL: stop repairing"
    # The unrepaired SQL goes back to the generator with its error, and the next generation works.
    assert "nosuch" in helpers.inputs_of(lm, "GenerateSQL")[1]["feedback"]
    assert pred.sql == GOOD


def test_each_role_asks_for_its_own_completion_budget_and_stops_after_its_last_field(engine, retriever, helpers):
    import dspy

    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.lm.accounting import current_predictor
    from reflect_sql.programs import build_program

    settings = helpers.Settings(generator_max_tokens=301, repairer_max_tokens=302, retrieval_judge_max_tokens=303,
                                semantic_judge_max_tokens=304, entailment_judge_max_tokens=305)
    lm = helpers.ScriptedLM(helpers.Script(GenerateSQL=[{"sql": "SELECT nope FROM stores"}, {"sql": GOOD}],
                                           RepairSQL={"repaired_sql": GOOD}))
    seen: dict[str, tuple] = {}
    complete = lm.engine_impl.complete

    def recording(request):
        seen[current_predictor()] = (request.config.max_tokens, tuple(request.config.stop or ()))
        return complete(request)

    lm.engine_impl.complete = recording
    program = build_program(settings, engine, retriever)
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        program(question="What is the return rate of each store?")
    stop = ("[[ ## completed ## ]]",)
    assert seen == {"RetrievalJudge": (303, stop), "GenerateSQL": (301, stop), "RepairSQL": (302, stop),
                    "SemanticJudge": (304, stop), "EntailmentJudge": (305, stop)}


def test_a_regeneration_that_repeats_samples_until_the_sql_is_new(engine, retriever, helpers):
    """The judge rejects ALSO_GOOD; the generator's greedy reply repeats it; a sample moves to GOOD."""
    import dspy

    from reflect_sql.lm.accounting import current_predictor
    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.programs import build_program

    settings = Settings(max_semantic_iterations=3, use_entailment=False, resample_temperature=0.9)
    lm = helpers.ScriptedLM(helpers.Script(GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": ALSO_GOOD + " ;"}, {"sql": GOOD}],
                                           SemanticJudge=[helpers.semantic(3, "wrong rate"), helpers.semantic(9)]))
    configs = []
    complete = lm.engine_impl.complete

    def recording(request):
        if current_predictor() == "GenerateSQL":
            configs.append((request.config.temperature, request.config.seed))
        return complete(request)

    lm.engine_impl.complete = recording
    program = build_program(settings, engine, retriever)
    with dspy.context(lm=lm, adapter=make_adapter(settings)):
        pred = program(question="What is the return rate of each store?")
    assert pred.sql == GOOD
    second = steps(pred, "synthesis.generate")[1]
    assert second["scores"] == {"repeats": 1, "samples": 1} and second["decision"] == "generated after 1 repeat(s)"
    assert second["cost"]["lm_calls"] == 2
    # Greedy first (the settings' temperature), then a sample at resample_temperature with its own seed.
    assert configs[:2] == [(None, None), (None, None)] and configs[2] == (0.9, 1)


def test_a_prompt_already_sent_is_not_sent_again_unchanged(run, helpers):
    """Two generations without SQL leave the same note: the third prompt equals the second, so it samples."""
    settings = Settings(max_semantic_iterations=3, use_entailment=False, json_adapter_fallback=False)
    script = helpers.Script(GenerateSQL=["Sorry.", "Sorry.", {"sql": GOOD}])
    pred, lm = run(script, settings)
    third = steps(pred, "synthesis.generate")[2]
    assert third["scores"] == {"samples": 1} and pred.sql == GOOD
    assert helpers.calls_by_signature(lm)["GenerateSQL"] == 3


def test_extra_candidates_join_the_pool_and_a_vote_can_overrule_the_loops(run, helpers):
    """n_candidates=3: the loops accept ALSO_GOOD, but two samples agree on another result; vote takes
    the later of the two (equal rank: the later one wins).
    The vote's answer was never judged, so it is not verified and does not enrich the KB."""
    names, same_names = "SELECT name FROM stores", "SELECT name FROM stores WHERE 1 = 1"
    for rule, expected in (("paper", ALSO_GOOD), ("vote", same_names)):
        script = helpers.Script(GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": names}, {"sql": same_names}])
        pred, lm = run(script, Settings(n_candidates=3, selection=rule))
        samples = steps(pred, "synthesis.sample")
        assert [s["decision"] for s in samples] == ["compiles: added to the pool"] * 2
        assert pred.sql == expected, rule
        if rule == "vote":
            (selection,) = steps(pred, "selection")
            assert selection["scores"]["pool"] == 3 and selection["scores"]["group_sizes"] == [2, 1]
            # The trace lists the whole pool with each candidate's result digest and scores.
            listed = selection["inputs"]["pool"]
            assert {c["sql"] for c in listed} == {ALSO_GOOD, names, same_names}
            by_sql = {c["sql"]: c for c in listed}
            assert by_sql[names]["result"] == by_sql[same_names]["result"] != by_sql[ALSO_GOOD]["result"]
            assert by_sql[ALSO_GOOD]["entailment"] is not None and by_sql[names]["entailment"] is None
            assert selection["decision"] == "chose another candidate of the pool"
            assert steps(pred, "enrichment")[-1]["decision"].startswith("skipped")
        else:
            assert not steps(pred, "selection")


def test_judge_pool_scores_each_unjudged_result_group_and_can_turn_a_vote(run, helpers):
    """Two samples agree on a result the loops never judged; the loops' answer is alone. By agreement
    alone (an unjudged group counts as E neutral) the pair wins; judged, its E is at the bottom and
    the loops' answer wins. One extra entailment call: one per unjudged group, not per candidate."""
    names, same_names = "SELECT name FROM stores", "SELECT name FROM stores WHERE 1 = 1"
    weights = dict(n_candidates=3, selection="judge_vote", vote_weight_agreement=0.5, vote_weight_semantic=0.0,
                   vote_weight_entailment=0.5)
    verdicts = {ALSO_GOOD: helpers.entailment(4, 4), names: helpers.entailment(1, 1, "names only, no rate"),
                same_names: helpers.entailment(1, 1, "names only, no rate")}
    chosen = {}
    for judged in (False, True):
        script = helpers.Script(GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": names}, {"sql": same_names}],
                                EntailmentJudge=lambda inputs: verdicts[inputs["sql"]])
        pred, lm = run(script, Settings(judge_pool=judged, **weights))
        chosen[judged] = pred.sql
        judged_sql = [i["sql"] for i in helpers.inputs_of(lm, "EntailmentJudge")]
        if judged:
            assert judged_sql[0] == ALSO_GOOD and judged_sql[1:] in ([names], [same_names])
            extra = [st for st in steps(pred, "entailment") if st["decision"].startswith("judged for selection")]
            assert len(extra) == 1 and extra[0]["decision"] == "judged for selection (2 agreeing candidate(s))"
            assert extra[0]["feedback"] is None and extra[0]["scores"]["E"] == 1
        else:
            assert judged_sql == [ALSO_GOOD]
    assert chosen[False] in (names, same_names) and chosen[True] == ALSO_GOOD


def test_a_judged_pool_runs_each_candidate_once(engine, run, helpers, monkeypatch):
    """The vote executes every pool candidate; judging a group's best must not run its SQL again."""
    names, same_names = "SELECT name FROM stores", "SELECT name FROM stores WHERE 1 = 1"
    ran = []
    real = type(engine).execute
    monkeypatch.setattr(type(engine), "execute", lambda self, sql, **kw: ran.append(sql) or real(self, sql, **kw))
    script = helpers.Script(GenerateSQL=[{"sql": ALSO_GOOD}, {"sql": names}, {"sql": same_names}],
                            EntailmentJudge=lambda inputs: helpers.entailment(4, 4) if inputs["sql"] == ALSO_GOOD
                            else helpers.entailment(1, 1, "names only, no rate"))
    settings = Settings(n_candidates=3, selection="judge_vote", judge_pool=True, vote_weight_agreement=0.5,
                        vote_weight_semantic=0.0, vote_weight_entailment=0.5)
    pred, lm = run(script, settings)
    judged = [i["sql"] for i in helpers.inputs_of(lm, "EntailmentJudge")]
    assert len(judged) == 2  # the loops' answer and the one unjudged group
    assert sorted(ran) == sorted({ALSO_GOOD, names, same_names}), ran


def test_the_loops_answer_takes_the_place_of_its_unjudged_twin_in_the_pool(run, helpers):
    """An extra sample wrote GOOD before the loops did; the loops' round-1 answer repeats it and passes.
    Selection must weigh the judged answer, not its unjudged twin: it keeps it, and it is verified."""
    names = "SELECT name FROM stores"
    verdicts = {names: helpers.entailment(1, 1, "names only, no rate"), GOOD: helpers.entailment(5, 5)}
    for judged in (False, True):
        script = helpers.Script(GenerateSQL=[{"sql": names}, {"sql": GOOD}, {"sql": GOOD}],
                                EntailmentJudge=lambda inputs: verdicts[inputs["sql"]])
        settings = Settings(n_candidates=2, selection="vote", max_resamples=0, judge_pool=judged)
        pred, lm = run(script, settings)
        assert pred.sql == GOOD, judged
        (selection,) = steps(pred, "selection")
        assert selection["decision"] == "kept the loops' answer"
        assert [c["sql"] for c in selection["inputs"]["pool"]].count(GOOD) == 1
        # GOOD is judged once, by the loops; the pool adds no judge call for it.
        assert [i["sql"] for i in helpers.inputs_of(lm, "EntailmentJudge")] == [names, GOOD]
        assert steps(pred, "enrichment")[-1]["decision"] != "skipped: the answer did not pass every check"


def test_judge_pool_needs_a_vote_and_the_entailment_judge():
    from reflect_sql.settings import Settings as Plain

    for bad in (dict(selection="paper"), dict(selection="vote", use_entailment=False)):
        with pytest.raises(ValueError, match="judge_pool needs selection vote or judge_vote"):
            Plain(judge_pool=True, **bad)
    assert Plain(judge_pool=True, selection="judge_vote").judge_pool


def test_a_whole_database_context_is_accepted_without_asking_the_retrieval_judge(run, retriever, helpers, monkeypatch):
    """Neither a rewrite nor a wider k and m can add to the whole database, so no judge call is spent."""
    from reflect_sql.programs.retriever import SchemaRetriever

    # The fixture's retriever plays a pruning KB; this one hands over the whole schema as it is.
    monkeypatch.setattr(retriever, "retrieve", lambda q, k, m, evidence="": SchemaRetriever.retrieve(retriever, q, k, m, evidence))
    script = helpers.Script(RetrievalJudge=[helpers.retrieval(1, 1)], GenerateSQL={"sql": COUNT_SQL})
    pred, lm = run(script, Settings(theta_r=9), question=COUNT_Q)
    assert "RetrievalJudge" not in helpers.calls_by_signature(lm)
    (step,) = steps(pred, "retrieval")
    assert step["decision"] == "accept: the whole database fits the context budget"
    assert pred.sql == COUNT_SQL and len(pred.rows) == 1  # the pipeline carried on
