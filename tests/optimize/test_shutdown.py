"""SIGTERM on `reflect-sql tune` mid-trial: it exits promptly with 143, the trial and the study's MLflow
runs end KILLED, the study lock is released, and rerunning the command finishes the study with the
stopped trial's parameters and its finished questions kept. The LM is the oracle, paced like a slow
model (tests/experiments/shutdown_driver.py)."""
from __future__ import annotations

import fcntl
import json
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from reflect_sql.optimize.study_lock import study_lock_path

DRIVER = Path(__file__).parents[1] / "experiments" / "shutdown_driver.py"
PACE_S = 0.2
QUESTIONS = 4


def _results(trial_dir: Path) -> list[bytes]:
    path = trial_dir / "results.jsonl"
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


@pytest.mark.slow
def test_a_sigterm_stopped_tune_ends_killed_releases_its_lock_and_resumes_losing_nothing(
        tmp_path, tiny_dataset, write_config, signal_when):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    experiment = write_config(tmp_path / "exp.yaml", tiny_dataset, limit=QUESTIONS, mlflow_uri=uri)
    (tmp_path / "opt.yaml").write_text("experiment: exp.yaml\ntune: {study: stop, seed: 0}\n")
    out = tmp_path / "tune"
    command = [sys.executable, str(DRIVER), str(experiment), str(PACE_S),
               "tune", str(tmp_path / "opt.yaml"), "--trials", "3", "--out", str(out), "--program", "none"]

    def second_trial_under_way() -> bool:  # trial 0 done (4 lines), trial 1 has begun answering
        lines = [len(_results(d)) for d in (out / "trials").iterdir()] if (out / "trials").is_dir() else []
        return sorted(lines)[-2:] == [1, QUESTIONS] or sorted(lines)[-2:] == [2, QUESTIONS]

    code, seconds, err = signal_when(command, second_trial_under_way, signal.SIGTERM, cwd=tmp_path)
    assert code == 143, err
    assert seconds < 8, f"took {seconds:.1f} s to stop"
    assert err.strip().splitlines()[-1] == "reflect-sql: error: stopped (SIGTERM)"

    storage = f"sqlite:///{(out / 'optuna.db').resolve()}"
    study = optuna.load_study(study_name="stop", storage=storage)
    # The stopped trial FAILs and Optuna's retry callback queues it again, WAITING, with its parameters.
    first, stopped, *queued = study.trials
    assert [t.state for t in queued] in ([], [optuna.trial.TrialState.WAITING])
    assert first.state == optuna.trial.TrialState.COMPLETE
    assert stopped.state == optuna.trial.TrialState.FAIL
    partial = _results(Path(stopped.user_attrs["out"]))
    assert 1 <= len(partial) < QUESTIONS and all(line.endswith(b"\n") for line in partial)
    with open(study_lock_path(storage, "stop")) as handle:  # released, not left held
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.get_experiment_by_name("tune-test").experiment_id
    status = {r.info.run_name: r.info.status for r in client.search_runs([experiment_id])}
    assert status == {"tune:stop": "KILLED", "trial-0": "FINISHED", "trial-1": "KILLED"}

    # Resume: the stopped trial's parameters run again and its finished questions are not redone.
    done = subprocess.run([*command[:3], "0", *command[4:], "--json"], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["completed"] == 3
    study = optuna.load_study(study_name="stop", storage=storage)
    rerun = study.trials[2]
    assert rerun.state == optuna.trial.TrialState.COMPLETE and rerun.params == stopped.params
    resumed = _results(Path(rerun.user_attrs["out"]))
    ids = [json.loads(line)["question_id"] for line in resumed]
    assert len(ids) == QUESTIONS == len(set(ids)) and resumed[:len(partial)] == partial
    runs = client.search_runs([experiment_id])
    assert sorted(r.info.status for r in runs if r.info.run_name == "tune:stop") == ["FINISHED", "KILLED"]
