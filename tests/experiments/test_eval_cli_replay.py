"""``reflect-sql eval`` end to end: the real LM factory replaying a cassette recorded from the oracle
LM gives the recorded run's answers, and the run lands in MLflow."""
from __future__ import annotations

import json

import pytest

from reflect_sql.cli import main
from reflect_sql.experiments.config import load_config
from reflect_sql.experiments.pipeline import PipelineFactory
from reflect_sql.experiments.runner import run_eval
from reflect_sql.experiments.scripted import oracle_script
from reflect_sql.lm.cassette import Cassette
from reflect_sql.lm.scripted import ScriptedLM

KEEP = ("question_id", "sql", "correct", "status", "rows_digest", "scores", "trace", "recall")


def _answers(out):
    return {r["question_id"]: {k: r[k] for k in KEEP}
            for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


@pytest.mark.slow
def test_eval_command_replays_a_recorded_run_exactly(benchmarks_dir, tmp_path, capsys):
    config_path = tmp_path / "c.yaml"
    config_path.write_text(
        f"dataset: {{format: bird, root: {benchmarks_dir / 'bird'}, db_ids: [superhero], limit: 4}}\n"
        "kb: {enabled: false}\nmlflow: {enabled: true, experiment: replay-test}\n"
        f"settings: {{lm_cache: false, use_enrichment: false, mlflow_uri: 'sqlite:///{tmp_path}/mlruns.db'}}\n")
    config = load_config(config_path)
    questions = config.dataset.load()
    s = config.settings
    cassette = Cassette(tmp_path / "cassette", "record")
    script = oracle_script(questions, wrong=[questions[2].question])
    # Recorded under the configured model's name and parameters, as the real LM would send them.
    lms = tuple(ScriptedLM(script, model=s.lm, role=role, cassette=cassette, temperature=s.lm_temperature,
                           max_tokens=s.lm_max_tokens) for role in ("generator", "judge"))
    recorded = run_eval(config, tmp_path / "recorded", PipelineFactory(config, tmp_path / "recorded", lms=lms), progress=False)
    assert recorded["overall"] == 75.0

    code = main(["eval", str(config_path), "--set", f"lm_replay_dir={tmp_path / 'cassette'}",
                 "--out", str(tmp_path / "replayed"), "--no-progress", "--json"])
    assert code == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["overall"] == 75.0 and replayed["cost"]["lm_calls"] == recorded["cost"]["lm_calls"]
    assert _answers(tmp_path / "replayed") == _answers(tmp_path / "recorded")

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns.db")
    [run] = mlflow.search_runs(experiment_names=["replay-test"], output_format="list")
    assert run.data.metrics["ex_overall"] == 75.0 and run.data.params["generator_lm"] == s.lm
