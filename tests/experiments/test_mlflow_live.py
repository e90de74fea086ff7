"""Live MLflow runs against a sqlite tracking store: an evaluation's run is RUNNING while it goes,
with running metrics stepped by questions done, ends FINISHED (or FAILED / KILLED) with its true
duration, holds one table row per question, and a SIGKILLed then resumed evaluation continues the
same run. The LM is the scripted oracle (``experiments/scripted.py``), paced to look like a slow one."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from reflect_sql.errors import UserError
from reflect_sql.experiments.config import load_config
from reflect_sql.experiments.pipeline import PipelineFactory
from reflect_sql.experiments.runner import run_eval
from reflect_sql.experiments.scripted import oracle_lms
from reflect_sql.experiments.tracking import TABLE, EvalRun

PACE_S = 0.5


def write_config(tmp_path, root, *, name="live", experiment="live-test", autolog=False, db_ids="[superhero]", limit=6,
                 extra=""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\n"
        f"dataset: {{format: bird, root: {root}, db_ids: {db_ids}, limit: {limit}}}\n"
        f"kb: {{enabled: false}}\nmlflow: {{enabled: true, experiment: {experiment}, autolog: {str(autolog).lower()}}}\n"
        f"settings: {{lm_cache: false, use_enrichment: false, mlflow_uri: 'sqlite:///{tmp_path}/mlruns.db'}}\n" + extra)
    return path


class Paced:
    """The real pipeline on the oracle LM, each question ``pace_s`` slower; ``before(q)`` runs
    first in the question's worker thread (to look at the store mid-run)."""

    def __init__(self, config, out, wrong=(), pace_s=PACE_S, before=None):
        questions = config.dataset.load()
        self.inner = PipelineFactory(config, out, lms=oracle_lms(questions, wrong=wrong))
        self.pace_s, self.before = pace_s, before
        self.program = None

    def __call__(self, q):
        program = self.inner(q)

        def paced(**inputs):
            if self.before is not None:
                self.before(q)
            time.sleep(self.pace_s)
            return program(**inputs)

        return paced

    def close(self):
        self.inner.close()


@pytest.fixture()
def store(tmp_path):
    """An MLflow client on the test's sqlite store, initialised before any timing starts."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlruns.db"
    mlflow.set_tracking_uri(uri)
    MlflowClient().search_experiments()
    return MlflowClient(tracking_uri=uri)


def runs_of(store, experiment):
    exp = store.get_experiment_by_name(experiment)
    return [] if exp is None else store.search_runs([exp.experiment_id])


def run_id_of(out):
    return json.loads((out / "run.json").read_text())["mlflow"]["run_id"]


def table_of(store, run_id, tmp_path):
    import pandas as pd

    path = store.download_artifacts(run_id, TABLE, str(tmp_path / f"dl-{time.monotonic_ns()}"))
    return pd.read_json(path, orient="split", dtype=False)


@pytest.mark.slow
def test_a_live_eval_is_running_with_stepped_metrics_then_finished_with_its_true_duration(benchmarks_dir, tmp_path, store):
    config = load_config(write_config(tmp_path, benchmarks_dir / "bird"))
    questions = config.dataset.load()
    assert len(questions) == 6
    out = tmp_path / "run"
    seen = {}

    def before(q):
        # The fifth question starts only once the third one's row is logged (one worker, and the
        # runner submits the next question after logging the one that finished).
        if q.question_id == questions[4].question_id:
            run = store.get_run(run_id_of(out))
            history = store.get_metric_history(run.info.run_id, "running/ex")
            seen.update(status=run.info.status, ex={m.step: m.value for m in history},
                        seconds={m.step: m.value for m in store.get_metric_history(run.info.run_id, "running/seconds")})

    factory = Paced(config, out, wrong=[questions[1].question], before=before)
    started = time.time()
    summary = run_eval(config, out, factory, progress=False, tracker=EvalRun(config))
    wall = time.time() - started

    assert seen["status"] == "RUNNING"
    assert seen["ex"][3] == 66.67  # 2 of the first 3 right
    assert seen["seconds"][3] >= 3 * PACE_S

    [run] = runs_of(store, "live-test")
    assert run.info.run_id == run_id_of(out) and run.info.status == "FINISHED"
    duration = (run.info.end_time - run.info.start_time) / 1000
    assert abs(duration - wall) <= 0.1 * wall, (duration, wall)
    history = sorted(store.get_metric_history(run.info.run_id, "running/ex"), key=lambda m: m.step)
    assert [m.step for m in history] == [1, 2, 3, 4, 5, 6]
    assert history[-1].value == summary["overall"] == pytest.approx(500 / 6, abs=0.01)
    calls = {m.step: m.value for m in store.get_metric_history(run.info.run_id, "running/lm_calls")}
    assert calls[6] == summary["cost"]["lm_calls"] and calls[1] < calls[6]
    tokens = store.get_metric_history(run.info.run_id, "running/tokens")
    assert max(m.value for m in tokens) == summary["cost"]["prompt_tokens"] + summary["cost"]["completion_tokens"]
    assert run.data.metrics["ex_overall"] == summary["overall"] and run.data.params["mode"] == "reflect"

    table = table_of(store, run.info.run_id, tmp_path)
    assert len(table) == 6 and set(map(str, table["question_id"])) == {str(q.question_id) for q in questions}
    assert {"question", "db_id", "difficulty", "sql", "status", "correct", "score_retrieval", "score_semantic",
            "score_entailment", "lm_calls", "prompt_tokens", "completion_tokens", "seconds"} <= set(table.columns)
    wrong = table[table["question_id"].map(str) == str(questions[1].question_id)].iloc[0]
    assert wrong["status"] == "wrong" and wrong["score_entailment"] < config.settings.theta_e
    assert json.loads(run.data.tags["mlflow.loggedArtifacts"]) == [{"path": TABLE, "type": "table"}]

    # Run again on the finished directory: nothing to evaluate, and the run stays as it ended.
    run_eval(config, out, Paced(config, out), progress=False, tracker=EvalRun(config))
    again = store.get_run(run.info.run_id)
    assert again.info.status == "FINISHED" and again.info.end_time == run.info.end_time
    assert len(runs_of(store, "live-test")) == 1


KILLED_SCRIPT = textwrap.dedent(
    """
    import sys, time
    import dspy
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.runner import run_eval
    from reflect_sql.experiments.tracking import EvalRun

    def factory(q):
        def program(question, evidence=""):
            time.sleep(float(sys.argv[3]))  # a slow LM
            return dspy.Prediction(sql=q.gold_sql, rows=[], scores={"semantic": 9.0, "entailment": 4.0},
                                   cost={"lm_calls": 2, "prompt_tokens": 100, "completion_tokens": 10})
        return program

    config = load_config(sys.argv[1])
    run_eval(config, sys.argv[2], factory, progress=False, tracker=EvalRun(config, table_every_s=0))
    """
)


@pytest.mark.slow
def test_a_sigkilled_then_resumed_eval_is_one_run_with_one_row_per_question(benchmarks_dir, tmp_path, store, sigkill_after):
    config_path = write_config(tmp_path, benchmarks_dir / "bird", name="killed", experiment="kill-test")
    script = tmp_path / "run.py"
    script.write_text(KILLED_SCRIPT)
    out = tmp_path / "out"
    code, done = sigkill_after([sys.executable, str(script), str(config_path), str(out), "0.5"],
                               out / "results.jsonl", answers=3, timeout_s=120)
    assert code == -signal.SIGKILL and 3 <= len(done) < 6, "the kill must land mid-run"
    [killed] = runs_of(store, "kill-test")
    assert killed.info.status == "RUNNING"  # nothing can end a SIGKILLed run but its resumption
    assert killed.info.run_id == run_id_of(out)
    assert 1 <= len(table_of(store, killed.info.run_id, tmp_path)) <= len(done)

    subprocess.run([sys.executable, str(script), str(config_path), str(out), "0"], check=True, timeout=180)
    [run] = runs_of(store, "kill-test")
    assert run.info.run_id == killed.info.run_id == run_id_of(out) and run.info.status == "FINISHED"
    meta = json.loads((out / "run.json").read_text())
    assert len(meta["sessions"]) == 2
    table = table_of(store, run.info.run_id, tmp_path)
    ids = [json.loads(line)["question_id"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert len(table) == 6 and sorted(map(str, table["question_id"])) == sorted(map(str, ids))
    steps = [m.step for m in store.get_metric_history(run.info.run_id, "running/ex")]
    assert len(steps) == len(set(steps)) and max(steps) == 6 and set(steps) <= set(range(1, 7))
    seconds = {m.step: m.value for m in store.get_metric_history(run.info.run_id, "running/seconds")}
    assert seconds[6] == pytest.approx(sum(s["seconds"] for s in meta["sessions"]), abs=0.5)
    assert run.data.metrics["ex_overall"] == 100.0


def test_an_eval_that_raises_ends_failed_and_one_interrupted_ends_killed(tiny_bird, tmp_path, store):
    config = load_config(write_config(tmp_path, tiny_bird, experiment="status-test", db_ids="null"))

    def broken(q):
        def program(question, evidence=""):
            raise UserError("the LM is not configured")  # a configuration problem ends the run
        return program

    with pytest.raises(UserError, match="not configured"):
        run_eval(config, tmp_path / "failed", broken, progress=False, tracker=EvalRun(config))
    assert store.get_run(run_id_of(tmp_path / "failed")).info.status == "FAILED"

    def interrupted(q):
        def program(question, evidence=""):
            if q.question_id == 11:
                time.sleep(1.0)  # question 10 is logged first
                raise KeyboardInterrupt
            import dspy

            return dspy.Prediction(sql=q.gold_sql, rows=[], scores={}, cost={"lm_calls": 1})
        return program

    out = tmp_path / "interrupted"
    with pytest.raises(KeyboardInterrupt):
        run_eval(config, out, interrupted, progress=False, tracker=EvalRun(config, table_every_s=0))
    run = store.get_run(run_id_of(out))
    assert run.info.status == "KILLED" and run.info.end_time >= run.info.start_time
    done = [json.loads(line)["question_id"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert 10 in done and 11 not in done
    assert sorted(table_of(store, run.info.run_id, tmp_path)["question_id"]) == sorted(done)  # the rows before Ctrl-C


def test_an_ablation_parent_runs_from_before_its_first_variant_and_a_resumed_ablation_continues_its_runs(tiny_bird, tmp_path, store):
    import dspy

    from reflect_sql.experiments.ablation import run_ablation

    (tmp_path / "full.yaml").write_text(
        f"name: full\ndataset: {{format: bird, root: {tiny_bird}}}\nmlflow: {{enabled: true, experiment: abl-live}}\n"
        f"settings: {{mlflow_uri: 'sqlite:///{tmp_path}/mlruns.db'}}\n")
    (tmp_path / "no_entailment.yaml").write_text("extends: full.yaml\nname: no_entailment\nsettings: {use_entailment: false}\n")
    (tmp_path / "set.yaml").write_text("name: live-ablation\nvariants: [full.yaml, no_entailment.yaml]\n")
    interrupt = {"on": True}

    def factory_for(config, run_dir):
        def program(question, evidence=""):
            time.sleep(0.2)
            q = next(q for q in config.dataset.load() if q.question == question)
            if interrupt["on"] and not config.settings.use_entailment and q.question_id == 11:
                raise KeyboardInterrupt  # Ctrl-C in the second variant
            return dspy.Prediction(sql=q.gold_sql, rows=[], scores={"semantic": 9.0}, cost={"lm_calls": 3})
        return lambda q: program

    out = tmp_path / "abl"
    with pytest.raises(KeyboardInterrupt):
        run_ablation(tmp_path / "set.yaml", out, progress=False, factory_for=factory_for)
    runs = {r.info.run_name: r for r in runs_of(store, "abl-live")}
    assert set(runs) == {"live-ablation", "full", "no_entailment"}
    parent = runs["live-ablation"]
    assert parent.info.status == "KILLED" and runs["no_entailment"].info.status == "KILLED"
    assert runs["full"].info.status == "FINISHED"
    assert parent.info.start_time <= runs["full"].info.start_time <= runs["full"].info.end_time <= runs["no_entailment"].info.start_time
    assert {r.data.tags["mlflow.parentRunId"] for r in (runs["full"], runs["no_entailment"])} == {parent.info.run_id}

    interrupt["on"] = False
    run_ablation(tmp_path / "set.yaml", out, progress=False, factory_for=factory_for)
    after = {r.info.run_name: r for r in runs_of(store, "abl-live")}
    assert len(runs_of(store, "abl-live")) == 3  # the same three runs, continued
    assert {n: r.info.run_id for n, r in after.items()} == {n: r.info.run_id for n, r in runs.items()}
    assert {r.info.status for r in after.values()} == {"FINISHED"}
    assert after["full"].info.end_time == runs["full"].info.end_time  # finished before: not reopened
    assert after["live-ablation"].info.end_time >= after["no_entailment"].info.end_time
    assert after["no_entailment"].data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert len(table_of(store, after["no_entailment"].info.run_id, tmp_path)) == 3
    assert [m.step for m in sorted(store.get_metric_history(after["no_entailment"].info.run_id, "running/ex"),
                                   key=lambda m: m.step)][-1] == 3
    artifacts = {f.path for f in store.list_artifacts(parent.info.run_id)}
    assert {"ablation.md", "ablation.json", "charts"} <= artifacts
    assert after["live-ablation"].data.params["variants"] == "full,no_entailment"


@pytest.fixture()
def autolog():
    """``mlflow.dspy.autolog`` is process-wide: switched off again after the test."""
    import mlflow

    yield
    mlflow.dspy.autolog(disable=True)


@pytest.mark.slow
def test_with_autolog_each_question_is_one_trace_of_its_loop_steps_and_its_id_is_in_the_table(benchmarks_dir, tmp_path, store, autolog):
    from reflect_sql.experiments.tracking import enable_autolog

    config = load_config(write_config(tmp_path, benchmarks_dir / "bird", experiment="trace-test", autolog=True, limit=3))
    questions = config.dataset.load()
    enable_autolog(config)
    out = tmp_path / "run"
    run_eval(config, out, Paced(config, out, wrong=[questions[1].question], pace_s=0), progress=False,
             tracker=EvalRun(config))
    run_id = run_id_of(out)
    table = table_of(store, run_id, tmp_path)
    records = {r["question_id"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert len(table) == 3 and table["trace_id"].notna().all()
    assert dict(zip(table["question_id"], table["trace_id"])) == {k: r["mlflow_trace_id"] for k, r in records.items()}
    import mlflow

    traces = {t.info.trace_id: t for t in mlflow.search_traces(run_id=run_id, return_type="list")}
    assert set(table["trace_id"]) == set(traces)
    wrong = traces[records[questions[1].question_id]["mlflow_trace_id"]]
    root = wrong.data.spans[0]
    assert root.name == f"question {questions[1].question_id}" and root.parent_id is None
    assert root.inputs["question"] == questions[1].question and root.outputs["sql"] == records[questions[1].question_id]["sql"]
    names = [s.name for s in wrong.data.spans]
    # The loop steps under the question: each loop's module and every LM call the question cost.
    assert {"ReflectSQL.forward", "RetrievalLoop.forward", "SynthesisLoop.forward", "EntailmentLoop.forward"} <= set(names)
    assert names.count("ScriptedLM.__call__") == records[questions[1].question_id]["cost"]["lm_calls"]
