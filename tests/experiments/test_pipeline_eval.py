"""The runner over the real pipeline (engine, program, loops) with the zero-latency oracle LM."""
from __future__ import annotations

import json

import pytest

from reflect_sql.experiments.config import load_config
from reflect_sql.experiments.pipeline import PipelineFactory
from reflect_sql.experiments.runner import run_eval
from reflect_sql.experiments.scripted import oracle_lms


def _records(out):
    rows = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        r = json.loads(line)
        r.pop("cost")
        rows[r["question_id"]] = r
    return rows


@pytest.mark.parametrize("mode", ["reflect", "single-pass"])
def test_real_pipeline_with_oracle_lm_is_right_and_deterministic(benchmarks_dir, tmp_path, mode):
    cfg_path = tmp_path / "c.yaml"
    cfg_path.write_text(f"dataset: {{format: bird, root: {benchmarks_dir / 'bird'}, db_ids: [superhero], limit: 5}}\n"
                        f"mode: {mode}\nkb: {{enabled: false}}\nmlflow: {{enabled: false}}\n"
                        "settings: {lm_cache: false, use_enrichment: false}\n")
    config = load_config(cfg_path)
    questions = config.dataset.load()
    wrong = questions[1].question
    summaries = []
    for out in (tmp_path / "a", tmp_path / "b"):
        factory = PipelineFactory(config, out, lms=oracle_lms(questions, wrong=[wrong]))
        summaries.append(run_eval(config, out, factory, progress=False))
    assert summaries[0]["counts"]["overall"] == 5
    assert summaries[0]["overall"] == 80.0 == summaries[1]["overall"]
    a, b = _records(tmp_path / "a"), _records(tmp_path / "b")
    assert a == b  # everything but timing is reproducible
    bad = a[questions[1].question_id]
    assert bad["correct"] is False and bad["status"] == "wrong"
    ok = a[questions[0].question_id]
    assert ok["correct"] and ok["rows_digest"] and ok["row_count"] >= 1
    loops = set(ok["trace"]["by_loop"])
    if mode == "reflect":
        assert {"retrieval", "synthesis.generate", "synthesis.semantic", "entailment"} <= loops
        assert ok["scores"]["semantic"] == 10 and ok["scores"]["entailment"] == 5
        # The wrong answer was judged low, sent back, and still reported with its scores.
        assert bad["trace"]["rounds"] >= 1 and bad["scores"]["entailment"] < config.settings.theta_e
    else:
        assert loops == {"retrieval", "synthesis.generate", "execution"}
    costs = [json.loads(l)["cost"] for l in (tmp_path / "a" / "results.jsonl").read_text().splitlines()]
    assert all(c["lm_calls"] >= 1 and c["prompt_tokens"] > 0 for c in costs)
