import json
import math
import textwrap

import optuna
import pytest

from reflect_sql.errors import UserError
from reflect_sql.experiments.config import load_config
from reflect_sql.experiments.runner import run_eval
from reflect_sql.optimize.config import load_optimize_config
from reflect_sql.optimize.search_space import settings_from_params
from reflect_sql.optimize.config import TuneOptions
from reflect_sql.optimize.study import open_storage, open_study, run_study
from reflect_sql.settings import SEMANTIC_WEIGHT_KEYS, load_settings

COMPLETE = optuna.trial.TrialState.COMPLETE


@pytest.fixture()
def make_config(tmp_path, tiny_dataset, write_config):
    def make(**kw):
        return load_optimize_config(write_config(tmp_path / "exp.yaml", tiny_dataset, **kw))

    return make


def _results_lines(trial_dir):
    return [json.loads(line) for line in (trial_dir / "results.jsonl").read_text().splitlines() if line.strip()]


def test_study_resumes_after_interruption(tmp_path, make_config, scripted_factory, scripted_reply):
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.lm.scripted import ScriptedLM

    oc = make_config()
    out = tmp_path / "tune"
    first = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=2, out=out)
    assert first.completed == 2

    # The third trial is interrupted (Ctrl-C) after its first question's LM calls.
    calls = {"n": 0}

    def interrupting(name, inputs):
        calls["n"] += 1
        if inputs.get("question") == "What is the most expensive dish?" or calls["n"] > 200:
            raise KeyboardInterrupt
        return scripted_reply(name, inputs)

    lm = ScriptedLM(interrupting)
    with pytest.raises(KeyboardInterrupt):
        run_study(oc.experiment, oc.tune, factory_for=lambda c, o: PipelineFactory(c, o, lms=(lm, lm)), trials=5, out=out)
    study = optuna.load_study(study_name="tiny-tune", storage=first.storage)
    states = [t.state for t in study.trials]
    assert states[:2] == [COMPLETE, COMPLETE] and states[2] == optuna.trial.TrialState.FAIL
    interrupted = study.trials[2]
    partial = _results_lines(tmp_path / interrupted.user_attrs["out"])
    assert 0 < len(partial) < 4  # some questions of the interrupted trial were already evaluated

    # Rerunning tops the study up to 5 completed trials; the interrupted parameters come first and
    # its finished questions are not evaluated again.
    before = len(scripted_factory.lm.calls)
    final = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=5, out=out)
    assert final.completed == 5
    study = optuna.load_study(study_name="tiny-tune", storage=first.storage)
    done = [t for t in study.trials if t.state == COMPLETE]
    assert len(done) == 5 and len(study.trials) == 6
    assert study.trials[3].params == interrupted.params
    resumed = _results_lines(tmp_path / study.trials[3].user_attrs["out"])
    assert len(resumed) == 4 and len({r["question_id"] for r in resumed}) == 4
    assert [r["question_id"] for r in resumed[: len(partial)]] == [r["question_id"] for r in partial]
    assert len(scripted_factory.lm.calls) > before
    # The sampler continued: no trial repeats another's parameters (the requeued one aside).
    distinct = {json.dumps(t.params, sort_keys=True) for t in done}
    assert len(distinct) == 5

    # Nothing left to do: a rerun with the same target runs no trial.
    calls_now = len(scripted_factory.lm.calls)
    again = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=5, out=out)
    assert again.completed == 5 and len(scripted_factory.lm.calls) == calls_now


def test_a_worker_that_loses_the_race_to_create_optuna_tables_opens_the_winners(tmp_path, monkeypatch):
    """Two workers on an empty database: the loser's insert of Optuna's version row collides, and
    Optuna wraps that IntegrityError in its own error. The loser waits and opens the same storage;
    any other storage error is not retried."""
    from sqlalchemy.exc import IntegrityError

    from reflect_sql.optimize import study as study_module

    real, attempts = study_module.RDBStorage, []

    def racing(*args, **kwargs):
        attempts.append(args[0])
        if len(attempts) == 1:
            try:
                raise IntegrityError("INSERT INTO version_info", {}, Exception("duplicate key"))
            except IntegrityError as exc:
                raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from exc
        return real(*args, **kwargs)

    monkeypatch.setattr(study_module.time, "sleep", lambda s: None)
    monkeypatch.setattr(study_module, "RDBStorage", racing)
    storage, _ = open_storage(f"sqlite:///{tmp_path / 'o.db'}", TuneOptions(heartbeat_s=1, grace_s=2))
    assert len(attempts) == 2 and open_study("s", storage, multi_objective=False, seed=0)[1]

    def broken(*args, **kwargs):
        raise optuna.exceptions.StorageInternalError("something else")

    monkeypatch.setattr(study_module, "RDBStorage", broken)
    with pytest.raises(optuna.exceptions.StorageInternalError, match="something else"):
        open_storage(f"sqlite:///{tmp_path / 'p.db'}", TuneOptions(heartbeat_s=1, grace_s=2))


def test_a_trial_whose_heartbeat_stops_is_retried_once_with_its_parameters(tmp_path):
    """Optuna's heartbeat and retry callback, as ``open_storage`` configures them: a RUNNING trial
    silent for longer than the grace period is failed and queued again, once."""
    import time

    from optuna.storages import fail_stale_trials

    storage, _ = open_storage(f"sqlite:///{tmp_path / 'o.db'}", TuneOptions(heartbeat_s=1, grace_s=2))
    study, created = open_study("s", storage, multi_objective=False, seed=0)
    assert created and not open_study("s", storage, multi_objective=False, seed=0)[1]
    trial = study.ask()
    params = {"x": trial.suggest_float("x", 0, 1)}
    storage.record_heartbeat(trial._trial_id)  # then the worker dies: no more heartbeats
    fail_stale_trials(study)
    assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.RUNNING]  # within the grace period
    time.sleep(3.2)
    fail_stale_trials(study)
    trials = study.get_trials()
    assert trials[0].state == optuna.trial.TrialState.FAIL
    assert trials[1].state == optuna.trial.TrialState.WAITING and trials[1].params == params
    assert trials[1].system_attrs["failed_trial"] == 0
    fail_stale_trials(study)
    assert len(study.get_trials()) == 2  # retried once, not twice


def test_best_config_round_trips_into_eval_and_weights_stay_on_the_simplex(tmp_path, make_config, scripted_factory):
    oc = make_config()
    out = tmp_path / "tune"
    result = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=8, out=out)
    study = optuna.load_study(study_name="tiny-tune", storage=result.storage)
    exs = set()
    for t in study.trials:
        s = settings_from_params(t.params, oc.experiment.settings)
        assert math.isclose(sum(getattr(s, k) for k in SEMANTIC_WEIGHT_KEYS), 1.0, abs_tol=1e-9)
        exs.add(t.values[0])
    assert len(exs) > 1, "the scripted objective should respond to the settings"

    baseline = study.trials[0]
    assert baseline.user_attrs["baseline"] and settings_from_params(baseline.params, oc.experiment.settings) == oc.experiment.settings

    best_trial = max(study.trials, key=lambda t: t.values[0])
    best_settings = settings_from_params(study.trials[result.best[0]["trial"]].params, oc.experiment.settings)
    assert result.best[0]["ex"] == best_trial.values[0]
    assert load_settings(result.best_settings_path) == best_settings
    tuned = load_config(result.best_config_path)
    assert tuned.settings == best_settings
    assert tuned.dataset.root == oc.experiment.dataset.root and tuned.name == "tiny-tuned"

    # The runner accepts it, and reproduces the tuned EX on the same questions.
    summary = run_eval(tuned, tmp_path / "eval", scripted_factory(tuned, tmp_path / "eval"), progress=False)
    assert summary["overall"] == best_trial.values[0]

    assert (out / "optimization_history.png").stat().st_size > 1000
    assert (out / "param_importances.png").stat().st_size > 1000


def test_multi_objective_writes_the_pareto_front(tmp_path, make_config, scripted_factory):
    oc = make_config(limit=2)
    oc.tune.multi_objective = True
    result = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=6, out=tmp_path / "mo")
    front = json.loads((tmp_path / "mo" / "pareto.json").read_text())
    assert front and front == result.best
    # No point of the front is dominated by a completed trial.
    study = optuna.load_study(study_name="tiny-tune", storage=result.storage)
    for point in front:
        ex, calls = point["values"]
        for t in study.trials:
            assert not (t.values[0] >= ex and t.values[1] <= calls and (t.values[0] > ex or t.values[1] < calls))
    assert (tmp_path / "mo" / "pareto_front.png").is_file()
    # A single-objective run cannot reopen it.
    oc.tune.multi_objective = False
    with pytest.raises(UserError, match="multi-objective"):
        run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=7, out=tmp_path / "mo")


def test_one_trial_skips_the_importance_chart_and_logs_nested_mlflow_runs(tmp_path, make_config, scripted_factory, monkeypatch):
    import mlflow

    monkeypatch.chdir(tmp_path)  # MLflow stores artifacts under the working directory

    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    oc = make_config(limit=1, mlflow_uri=uri)
    result = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=2, out=tmp_path / "t")
    assert result.plots["param_importances"].startswith("skipped")
    assert (tmp_path / "t" / "optimization_history.png").is_file()
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["tune-test"], output_format="list")
    parents = [r for r in runs if r.info.run_name == "tune:tiny-tune"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(parents) == 1 and len(children) == 2
    assert {"ex", "lm_calls_per_question"} <= set(children[0].data.metrics)
    assert "theta_s" in children[0].data.params


def test_tune_command_with_a_tuning_split(tmp_path, tiny_dataset, write_config, scripted_factory, monkeypatch, capsys):
    from reflect_sql.cli import main
    from reflect_sql.optimize import study as study_module

    write_config(tmp_path / "exp.yaml", tiny_dataset, limit=4)
    (tmp_path / "opt.yaml").write_text(
        "experiment: exp.yaml\ntune:\n  study: cli\n  seed: 3\n  dataset: {limit: 2}\n")
    monkeypatch.setattr(study_module, "_pipeline_factories", lambda program: scripted_factory)
    out = tmp_path / "cli-out"
    assert main(["tune", str(tmp_path / "opt.yaml"), "--trials", "2", "--out", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["completed"] == 2 and result["study"] == "cli"
    trial_dirs = list((out / "trials").iterdir())
    assert trial_dirs and all(len(_results_lines(d)) == 2 for d in trial_dirs)  # the tuning split
    tuned = load_config(result["best_config"])
    assert tuned.dataset.limit == 4  # eval runs on the experiment's own questions

    assert main(["tune", str(tmp_path / "opt.yaml"), "--trials", "0"]) == 2
    (tmp_path / "bad.yaml").write_text("experiment: exp.yaml\ntune: {trails: 3}\n")
    assert main(["tune", str(tmp_path / "bad.yaml")]) == 2
    assert "unknown tune key(s) trails" in capsys.readouterr().err


def test_trials_reuse_cached_lm_calls(tmp_path, make_config, scripted_reply):
    """Thresholds only steer control flow: a later trial's identical LM requests come from the cache."""
    import dspy

    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.lm.scripted import ScriptedLM

    saved = dspy.cache
    dspy.configure_cache(enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=str(tmp_path / "cache"))
    try:
        lm = ScriptedLM(scripted_reply, cache=True)
        oc = make_config()
        result = run_study(oc.experiment, oc.tune, factory_for=lambda c, o: PipelineFactory(c, o, lms=(lm, lm)),
                           trials=4, out=tmp_path / "cached")
    finally:
        dspy.cache = saved
    study = optuna.load_study(study_name="tiny-tune", storage=result.storage)
    questions = 4
    requested = sum(t.user_attrs["lm_calls_per_question"] * questions for t in study.trials)
    served_by_model = len(lm.calls)
    assert served_by_model < requested * 0.6, (served_by_model, requested)


def test_resuming_closes_the_mlflow_runs_a_killed_process_left_running(tmp_path, make_config, scripted_factory, monkeypatch):
    import mlflow
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    mlflow.set_tracking_uri(uri)
    client = MlflowClient()
    experiment_id = mlflow.set_experiment("tune-test").experiment_id
    out = tmp_path / "t"
    storage = f"sqlite:///{(out / 'optuna.db').resolve()}"
    # What SIGKILL leaves behind: the study's parent run and its trial run, both RUNNING; and runs
    # that must stay as they are: another study, and a study of the same name in another storage
    # (another --out), which may well be alive.
    dead_parent = client.create_run(experiment_id, run_name="tune:tiny-tune",
                                    tags={"study": "tiny-tune", "study_storage": storage})
    dead_trial = client.create_run(experiment_id, run_name="trial-0",
                                   tags={"mlflow.parentRunId": dead_parent.info.run_id})
    other = client.create_run(experiment_id, run_name="tune:other-study",
                              tags={"study": "other-study", "study_storage": storage})
    namesake = client.create_run(experiment_id, run_name="tune:tiny-tune",
                                 tags={"study": "tiny-tune", "study_storage": "sqlite:////elsewhere/optuna.db"})

    oc = make_config(limit=1, mlflow_uri=uri)
    oc.tune.storage = storage + "?timeout=30"  # the same study file, named another way
    run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=1, out=out)

    runs = (dead_parent, dead_trial, other, namesake)
    status = {r: client.get_run(r.info.run_id).info.status for r in runs}
    assert status[dead_parent] == "KILLED" and status[dead_trial] == "KILLED"
    assert status[other] == "RUNNING" and status[namesake] == "RUNNING"
    runs = mlflow.search_runs(experiment_names=["tune-test"], output_format="list")
    fresh = [r for r in runs if r.info.run_name == "tune:tiny-tune"
             and r.info.run_id not in (dead_parent.info.run_id, namesake.info.run_id)]
    assert [r.info.status for r in fresh] == ["FINISHED"]


def test_a_second_process_on_the_same_study_is_refused_and_loses_nothing(tmp_path, make_config, scripted_factory):
    import fcntl
    import subprocess
    import sys

    from reflect_sql.optimize.study_lock import study_lock_path

    oc = make_config(limit=1)
    out = tmp_path / "t"
    first = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=1, out=out)
    storage = first.storage
    lock = study_lock_path(storage, first.study_name)
    assert lock.parent == out  # beside optuna.db, whatever --out a second process names
    assert study_lock_path(storage + "?timeout=30", first.study_name) == lock
    assert study_lock_path("postgresql://u@h/db", first.study_name) is None  # a server study takes workers

    # Another process holds the study (a running `reflect-sql tune`).
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import fcntl, os, sys, time
        handle = open({str(lock)!r}, "a+")
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0); handle.truncate(); handle.write(str(os.getpid())); handle.flush()
        print("locked", flush=True)
        time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        oc.tune.storage = storage
        with pytest.raises(UserError, match=rf"another process \(pid {holder.pid}\)"):
            run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=3, out=tmp_path / "elsewhere")
    finally:
        holder.kill()
        holder.wait()
    study = optuna.load_study(study_name=first.study_name, storage=storage)
    assert [t.state for t in study.trials] == [COMPLETE]  # the refused process touched nothing

    # Once the holder is gone the study continues where it was.
    again = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=2, out=out)
    assert again.completed == 2
    with open(lock) as handle:  # released, not left held
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_retrieval_weights_are_searched_only_when_the_study_asks(tmp_path, make_config, scripted_factory):
    from dataclasses import replace

    from reflect_sql.settings import RETRIEVAL_WEIGHT_KEYS

    oc = make_config()
    plain = run_study(oc.experiment, oc.tune, factory_for=scripted_factory, trials=2, out=tmp_path / "plain")
    asked = run_study(oc.experiment, replace(oc.tune, retrieval_weights=True), factory_for=scripted_factory,
                      trials=2, out=tmp_path / "asked")
    assert plain.completed == asked.completed == 2
    def last_params(out):
        url = f"sqlite:///{out / 'optuna.db'}"
        return optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url).trials[-1].params

    searched, untouched = last_params(tmp_path / "asked"), last_params(tmp_path / "plain")
    assert set(RETRIEVAL_WEIGHT_KEYS) <= set(searched) and not set(RETRIEVAL_WEIGHT_KEYS) & set(untouched)
