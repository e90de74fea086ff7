"""The real embedded model answers a SmartRestaurant question through the full pipeline."""
from __future__ import annotations

import json
import os
import time
from importlib.resources import files

import pytest

pytestmark = [pytest.mark.embedded_lm, pytest.mark.slow]

QUESTION_ID = 9  # "How many items are on the Milk tea menu?"


@pytest.fixture(scope="module")
def restaurant(tmp_path_factory):
    from reflect_sql.experiments.smartrestaurant.demo_db import ensure_demo_db

    path = tmp_path_factory.mktemp("aria") / "smartrestaurant.sqlite"
    ensure_demo_db(path)
    scenario = files("reflect_sql.experiments.smartrestaurant")
    questions = json.loads((scenario / "questions.json").read_text(encoding="utf-8"))
    return path, next(q for q in questions if q["question_id"] == QUESTION_ID)


@pytest.mark.parametrize("mode", ["reflect", "single-pass"])
def test_embedded_model_answers_with_trace_and_cost(restaurant, mode, tmp_path):
    import dspy

    from reflect_sql.db import open_engine
    from reflect_sql.lm.factory import configure_lms
    from reflect_sql.lm.models import ModelError, ensure_model
    from reflect_sql.programs import build_program, prediction_to_json
    from reflect_sql.programs.retriever import SchemaRetriever
    from reflect_sql.settings import load_settings

    db_path, question = restaurant
    model = os.environ.get("REFLECT_SQL_TEST_LOCAL_MODEL", "qwen2.5-coder-1.5b")
    # One round per loop keeps CI time bounded while every loop still runs with its real judge. The
    # judges run on the 0.5B (the split setting of the issue-15 ablation): with the 1.5B judging too,
    # this one test took 210 s of a 13-minute suite; with the 0.5B, about 140 s.
    judge_model = os.environ.get("REFLECT_SQL_TEST_JUDGE_MODEL", "qwen2.5-coder-0.5b")
    settings = load_settings(overrides={
        "lm": f"local/{model}", "judge_lm": f"local/{judge_model}", "lm_cache": False, "max_retrieval_iterations": 1,
        "max_semantic_iterations": 1, "max_entailment_iterations": 1, "use_enrichment": False,
    }, environ={})
    try:
        for name in {model, judge_model}:
            ensure_model(name, settings.model_dir)
    except ModelError as exc:
        pytest.skip(f"embedded model unavailable: {exc}")

    generator_lm, judge_lm = configure_lms(settings)
    with open_engine(str(db_path), settings) as engine, dspy.context(lm=generator_lm):
        gold = engine.execute(question["SQL"]).rows
        program = build_program(settings, engine, SchemaRetriever(engine.introspect()), mode=mode,
                                generator_lm=generator_lm, judge_lm=judge_lm)
        started = time.perf_counter()
        prediction = program(question=question["question"], evidence=question["evidence"])
        elapsed = time.perf_counter() - started
    answer = prediction_to_json(prediction)
    print(f"\n{mode}: {elapsed:.1f}s, cost {answer['cost']}, sql {answer['sql']}")

    assert answer["sql"], answer.get("error")
    assert {tuple(r) for r in answer["rows"]} == {tuple(r) for r in gold}
    assert answer["trace"], "every answer carries its trace"
    loops = {step["loop"] for step in answer["trace"]}
    cost = answer["cost"]
    assert cost["lm_calls"] >= 1 and cost["prompt_tokens"] > 0 and cost["completion_tokens"] > 0
    if mode == "reflect":
        assert any(loop.startswith("retrieval") for loop in loops), loops
        assert any(loop.startswith("entailment") for loop in loops), loops
        assert cost["lm_calls"] >= 3  # generator plus the judges
        assert set(answer["scores"]) == {"retrieval", "semantic", "entailment"}
    else:
        assert cost["lm_calls"] == 1
