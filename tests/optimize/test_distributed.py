"""Distributed tuning (issue 18): ``reflect-sql tune --storage postgresql://...`` in several processes
sharing one study on the throwaway PostgreSQL, each logging to one MLflow store in it. A worker
SIGKILLed in the middle of a trial leaves it RUNNING with a silent heartbeat; the other worker
finds it stale after the grace period and Optuna's retry callback queues it again."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

WORKER = Path(__file__).with_name("tune_worker.py")
TRIALS = 8
QUESTIONS = 4


def _results(trial_dir: str | Path) -> list:
    path = Path(trial_dir) / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["question_id"] for line in path.read_bytes().splitlines(keepends=True) if line.endswith(b"\n")]


@pytest.fixture()
def databases(pg_url):
    """Two fresh databases on the test server: the Optuna study's and the MLflow store's."""
    import psycopg
    from psycopg import sql

    names = {"optuna": f"tune_optuna_{os.getpid()}", "mlflow": f"tune_mlflow_{os.getpid()}"}
    base = pg_url.rsplit("/", 1)[0]
    for attempt in range(60):  # a server started for this session may still be recovering on a loaded machine
        try:
            psycopg.connect(pg_url).close()
            break
        except psycopg.OperationalError:
            if attempt == 59:
                raise
            time.sleep(0.5)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for name in names.values():
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield {role: f"{base}/{name}" for role, name in names.items()}
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for name in names.values():
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.postgres
@pytest.mark.slow
def test_two_workers_share_one_study_and_a_killed_workers_trial_is_retried(tmp_path, tiny_dataset, write_config, databases):
    from mlflow.tracking import MlflowClient

    mlflow_uri = databases["mlflow"].replace("postgresql://", "postgresql+psycopg://", 1)
    write_config(tmp_path / "exp.yaml", tiny_dataset, limit=QUESTIONS, mlflow_uri=mlflow_uri)
    (tmp_path / "opt.yaml").write_text("experiment: exp.yaml\ntune: {study: shared, heartbeat_s: 1, grace_s: 3}\n")
    storage = databases["optuna"]
    # The store is initialised once, as an MLflow server's is before workers connect to it.
    MlflowClient(tracking_uri=mlflow_uri).search_experiments()
    out = tmp_path / "tune"  # one machine: the workers share --out, so a retry resumes the dead trial's questions
    command = [sys.executable, str(WORKER), "0.05", "tune", str(tmp_path / "opt.yaml"), "--storage", storage,
               "--trials", str(TRIALS), "--out", str(out), "--json"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    first = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed_as = f"{socket.gethostname()}:{first.pid}"
    sqlalchemy_url = storage.replace("postgresql://", "postgresql+psycopg://", 1)
    # One storage for the whole poll: a storage opened per poll keeps its own connection pool until
    # collected, and 20 polls a second filled the server's max_connections in CI.
    poll_storage = None
    try:
        # The first worker is killed in the middle of a trial: after its first question, before its last.
        victim = None
        deadline = time.monotonic() + 240
        while victim is None and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.05)
            try:
                poll_storage = poll_storage or optuna.storages.RDBStorage(sqlalchemy_url)
                study = optuna.load_study(study_name="shared", storage=poll_storage)
            except KeyError:  # not created yet
                continue
            except optuna.exceptions.StorageInternalError:
                # Our poll races the workers to insert Optuna's version row into the empty database.
                continue
            for t in study.get_trials(states=(optuna.trial.TrialState.RUNNING,)):
                if t.user_attrs.get("worker") == killed_as and 0 < len(_results(t.user_attrs["out"])) < QUESTIONS:
                    os.kill(first.pid, signal.SIGKILL)
                    victim = t
                    break
        assert victim is not None, f"the first worker never ran a trial: {first.poll()} {first.stderr.read() if first.poll() is not None else ''}"
        assert first.wait(timeout=30) == -signal.SIGKILL
        partial = _results(victim.user_attrs["out"])

        stdout, stderr = second.communicate(timeout=300)
        assert second.returncode == 0, stderr
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if poll_storage is not None:
            poll_storage.engine.dispose()

    study = optuna.load_study(study_name="shared", storage=sqlalchemy_url)
    trials = study.get_trials()
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    # 8 distinct trials, none run twice: distinct parameters, distinct directories, each question once.
    assert len(complete) == TRIALS == json.loads(stdout)["completed"]
    assert len({json.dumps(t.params, sort_keys=True) for t in complete}) == TRIALS
    assert len({t.user_attrs["out"] for t in complete}) == TRIALS
    for t in complete:
        ids = _results(t.user_attrs["out"])
        assert len(ids) == len(set(ids)) == QUESTIONS, (t.number, ids)
    # The killed trial failed on its silent heartbeat and was retried once, by the other worker,
    # with its parameters, resuming the questions it had finished.
    dead = study.trials[victim.number]
    assert dead.state == optuna.trial.TrialState.FAIL
    [retry] = [t for t in trials if optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(t) == victim.number]
    assert retry.state == optuna.trial.TrialState.COMPLETE and retry.params == dead.params
    assert retry.user_attrs["worker"] == f"{socket.gethostname()}:{second.pid}"
    assert retry.user_attrs["out"] == dead.user_attrs["out"]
    assert _results(retry.user_attrs["out"])[: len(partial)] == partial
    assert f"trial {victim.number} lost its worker" in stderr

    # Both workers logged to the one MLflow store: the dead worker's trial run and its own run are
    # KILLED (by the survivor, when it found the trial stale), the survivor's run FINISHED, and
    # every completed trial has a FINISHED run.
    client = MlflowClient(tracking_uri=mlflow_uri)
    experiment = client.get_experiment_by_name("tune-test")
    runs = client.search_runs([experiment.experiment_id])
    parents = {r.data.params.get("worker"): r for r in runs if r.info.run_name == "tune:shared"}
    assert parents[killed_as].info.status == "KILLED"
    assert parents[retry.user_attrs["worker"]].info.status == "FINISHED"
    by_id = {r.info.run_id: r for r in runs}
    assert by_id[dead.user_attrs["mlflow_run_id"]].info.status == "KILLED"
    assert {by_id[t.user_attrs["mlflow_run_id"]].info.status for t in complete} == {"FINISHED"}
