"""SIGTERM (a batch scheduler) and Ctrl-C on `reflect-sql eval` and `ablate`: the process exits promptly
with 143 / 130, the results log is whole, the MLflow run ends KILLED, and rerunning the command
resumes with nothing lost or doubled. The LM is the oracle, paced like a slow model, on two threads
(tests/experiments/shutdown_driver.py)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

DRIVER = Path(__file__).with_name("shutdown_driver.py")
PACE_S = 0.25  # per LM call; a question makes about four
QUESTIONS = 8


def _lines(results: Path) -> list[bytes]:
    return results.read_bytes().splitlines(keepends=True) if results.exists() else []


def _config(tmp_path: Path, root: Path) -> Path:
    path = tmp_path / "stop.yaml"
    path.write_text(
        f"name: stop\ndataset: {{format: bird, root: {root}, db_ids: [superhero], limit: {QUESTIONS}}}\n"
        "threads: 2\nkb: {enabled: false}\nmlflow: {enabled: true, experiment: stop-test}\n"
        f"settings: {{lm_cache: false, use_enrichment: false, mlflow_uri: 'sqlite:///{tmp_path}/mlruns.db'}}\n")
    return path


def _runs(tmp_path: Path, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db")
    return client, client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_stopped_eval_exits_promptly_killed_and_resumes_losing_nothing(benchmarks_dir, tmp_path, signal_when, signum):
    config = _config(tmp_path, benchmarks_dir / "bird")
    out = tmp_path / "out"
    results = out / "results.jsonl"
    command = [sys.executable, str(DRIVER), str(config), str(PACE_S),
               "eval", str(config), "--out", str(out), "--no-progress", "--program", "none"]

    code, seconds, err = signal_when(command, lambda: len(_lines(results)) >= 2, signum, cwd=tmp_path)
    assert code == 128 + signum, err
    # Questions in flight stop at their next LM call: well within one question's time, let alone
    # the LM timeout the runner would wait at most.
    assert seconds < 8, f"took {seconds:.1f} s to stop"
    assert err.strip().splitlines()[-1] == f"reflect-sql: error: stopped ({signal.Signals(signum).name})"
    lines = _lines(results)
    assert lines and all(line.endswith(b"\n") for line in lines)  # closed whole: no line cut
    done = [json.loads(line)["question_id"] for line in lines]
    assert len(done) == len(set(done)) and 2 <= len(done) < QUESTIONS, "the signal must land mid-run"
    assert all(json.loads(line)["exception"] is None for line in lines)  # no abandoned question logged as one
    meta = json.loads((out / "run.json").read_text())
    assert meta["sessions"][0]["evaluated"] == len(done) and meta["sessions"][0]["seconds"] > 0
    client, [run] = _runs(tmp_path, "stop-test")
    assert run.info.status == "KILLED" and run.info.run_id == meta["mlflow"]["run_id"]

    # Resume: the same command finishes the run, in the same MLflow run.
    done_again = subprocess.run([*command[:3], "0", *command[4:]], capture_output=True, text=True, timeout=300,
                                cwd=tmp_path)
    assert done_again.returncode == 0, done_again.stderr
    ids = [json.loads(line)["question_id"] for line in _lines(results)]
    assert len(ids) == QUESTIONS == len(set(ids)) and ids[:len(done)] == done  # kept in place, none rerun
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"] == 100.0 and summary["finished"] == QUESTIONS
    client, [run] = _runs(tmp_path, "stop-test")
    assert run.info.status == "FINISHED" and run.info.run_id == meta["mlflow"]["run_id"]
    assert run.data.metrics["ex_overall"] == 100.0


@pytest.mark.slow
def test_a_sigterm_stopped_ablation_ends_its_runs_killed_and_resumes(benchmarks_dir, tmp_path, signal_when):
    config = _config(tmp_path, benchmarks_dir / "bird")
    (tmp_path / "single.yaml").write_text("extends: stop.yaml\nname: single\nmode: single-pass\n")
    (tmp_path / "set.yaml").write_text("name: stop-set\nvariants: [stop.yaml, single.yaml]\n")
    out = tmp_path / "ablation"
    command = [sys.executable, str(DRIVER), str(config), str(PACE_S),
               "ablate", str(tmp_path / "set.yaml"), "--out", str(out), "--no-progress", "--program", "none"]
    code, seconds, err = signal_when(command, lambda: len(_lines(out / "stop" / "results.jsonl")) >= 2,
                                     signal.SIGTERM, cwd=tmp_path)
    assert code == 143 and seconds < 8, err
    client, runs = _runs(tmp_path, "stop-test")
    assert sorted(r.info.status for r in runs) == ["KILLED", "KILLED"]  # the set's run and its first variant's

    done = subprocess.run([*command[:3], "0", *command[4:]], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    client, runs = _runs(tmp_path, "stop-test")
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3
    ids = [json.loads(line)["question_id"] for line in _lines(out / "stop" / "results.jsonl")]
    assert len(ids) == QUESTIONS == len(set(ids))
