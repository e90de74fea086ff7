"""Tuning in MLflow (issue 23): each Optuna trial is a nested run started when the trial starts,
with its parameters, the trial's running metrics and question table, and its true status; the
study's run logs each trial's EX and its best EX as it improves, stepped by trial number."""
from __future__ import annotations

import pytest

from reflect_sql.optimize.config import load_optimize_config
from reflect_sql.optimize.study import run_study


@pytest.fixture()
def tracked(tmp_path, tiny_dataset, write_config, monkeypatch):
    import mlflow
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    oc = load_optimize_config(write_config(tmp_path / "exp.yaml", tiny_dataset, limit=4, mlflow_uri=uri))
    mlflow.set_tracking_uri(uri)
    return oc, MlflowClient(tracking_uri=uri)


def _runs(client):
    experiment = client.get_experiment_by_name("tune-test")
    return client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])


def _history(client, run_id, key):
    return [(m.step, m.value) for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def test_each_trial_is_a_live_nested_run_and_the_best_ex_is_logged_as_it_improves(tmp_path, tracked, scripted_factory):
    import mlflow

    oc, client = tracked
    seen = []

    def factory_for(config, out):
        # Called inside the trial, before its first question: its run is already there, with its parameters.
        run = mlflow.active_run()
        seen.append((run.info.run_name, client.get_run(run.info.run_id).info.status,
                     client.get_run(run.info.run_id).data.params.get("theta_s")))
        return scripted_factory(config, out)

    result = run_study(oc.experiment, oc.tune, factory_for=factory_for, trials=4, out=tmp_path / "t")
    runs = _runs(client)
    [parent] = [r for r in runs if r.info.run_name == "tune:tiny-tune"]
    trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert [r.info.run_name for r in trials] == ["trial-0", "trial-1", "trial-2", "trial-3"]
    assert [(name, status) for name, status, _ in seen] == [(f"trial-{n}", "RUNNING") for n in range(4)]
    assert all(theta_s is not None for _, _, theta_s in seen)
    assert parent.info.status == "FINISHED" and {r.info.status for r in trials} == {"FINISHED"}
    assert parent.info.start_time <= trials[0].info.start_time
    for earlier, later in zip(trials, trials[1:]):
        assert earlier.info.end_time <= later.info.start_time  # one after the other, each its own duration

    import optuna

    study = optuna.load_study(study_name="tiny-tune", storage=result.storage)
    ex = {t.number: t.values[0] for t in study.trials}
    for run in trials:
        n = int(run.data.params["trial"])
        assert run.data.metrics["ex"] == ex[n] and run.data.tags["kind"] == "trial"
        assert [step for step, _ in _history(client, run.info.run_id, "running/ex")] == [1, 2, 3, 4]
        assert _history(client, run.info.run_id, "running/ex")[-1][1] == ex[n]
        assert "questions.json" in {f.path for f in client.list_artifacts(run.info.run_id)}
    assert _history(client, parent.info.run_id, "trial_ex") == sorted(ex.items())
    best = _history(client, parent.info.run_id, "best_ex")
    expected, top = [], None
    for n, value in sorted(ex.items()):
        if top is None or value > top:
            top = value
            expected.append((n, value))
    assert best == expected and best[-1][1] == max(ex.values()) == result.best[0]["ex"]


def test_an_interrupted_trial_and_its_study_end_killed_and_a_resumed_study_carries_its_best_on(tmp_path, tracked,
                                                                                                scripted_factory, scripted_reply):
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.lm.scripted import ScriptedLM

    oc, client = tracked
    out = tmp_path / "t"
    first = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=2, out=out)

    def interrupting(name, inputs):
        if inputs.get("question") == "What is the most expensive dish?":
            raise KeyboardInterrupt
        return scripted_reply(name, inputs)

    lm = ScriptedLM(interrupting)
    with pytest.raises(KeyboardInterrupt):
        run_study(oc.experiment, oc.tune, factory_for=lambda c, o: PipelineFactory(c, o, lms=(lm, lm)), trials=3, out=out)
    runs = _runs(client)
    parents = [r for r in runs if r.info.run_name == "tune:tiny-tune"]
    assert [r.info.status for r in parents] == ["FINISHED", "KILLED"]
    [interrupted] = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[1].info.run_id]
    assert interrupted.info.run_name == "trial-2" and interrupted.info.status == "KILLED"
    assert interrupted.data.params["trial"] == "2"
    done_before = len(_history(client, interrupted.info.run_id, "running/ex"))
    assert 0 < done_before < 4  # its questions until Ctrl-C

    run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=3, out=out)
    parents = [r for r in _runs(client) if r.info.run_name == "tune:tiny-tune"]
    assert [r.info.status for r in parents] == ["FINISHED", "KILLED", "FINISHED"]
    # The third invocation's chart starts from the study's best so far, at its trial number.
    first_best = max(b["ex"] for b in first.best)
    best = _history(client, parents[2].info.run_id, "best_ex")
    assert best[0] == (1, first_best)
    [resumed] = [r for r in _runs(client) if r.data.tags.get("mlflow.parentRunId") == parents[2].info.run_id]
    assert resumed.info.run_name == "trial-3" and resumed.info.status == "FINISHED"
    # The re-queued trial resumed its questions: its table holds all four, the earlier ones included.
    import pandas as pd

    path = client.download_artifacts(resumed.info.run_id, "questions.json", str(tmp_path))
    assert len(pd.read_json(path, orient="split")) == 4
