"""MLflow: live runs an experimenter can watch while they run, and compare once they end.

- An evaluation's run (``EvalRun``) starts when the evaluation starts and logs, after each
  question, running metrics whose ``step`` is the number of questions done: ``running/ex`` (EX so
  far, in percent), ``running/lm_calls``, ``running/tokens`` (prompt + completion) and
  ``running/seconds`` (wall seconds of the evaluation so far, every session counted). The
  per-question results are an MLflow table (``questions.json``, ``mlflow.log_table``): question,
  db_id, difficulty, SQL, status, judge scores, cost and, with ``mlflow.autolog``, the id of the
  question's trace. The run ends with its true status: FINISHED, FAILED (an exception) or KILLED
  (Ctrl-C); its start and end are the evaluation's own, so the UI shows its true duration.
- A resumed evaluation continues the same run: its id is kept in ``run.json`` (``mlflow.run_id``)
  and its steps go on from the questions already done. A run that was SIGKILLed shows RUNNING until
  it is resumed. A FINISHED run with nothing left to evaluate is not reopened. The UI's duration of
  a resumed run spans the gap between its sessions; ``wall_seconds`` is the time spent evaluating.
- An ablation's parent run (``AblationRun``) starts before its first variant, each variant's run
  nests under it, and its id is kept in ``<out>/ablation_run.json``.

- A tuning study (``StudyRun``) has one parent run per ``tune`` process (a worker, when several
  share the study), and one nested run per trial, started with the trial and its parameters;
  the trial's evaluation logs into it (``EvalRun`` attached). A worker that dies leaves its runs
  RUNNING: they are marked KILLED when its trial is found stale (``kill_runs_of``), and, on a
  sqlite study that one process owns, when the study resumes (``close_stale_runs``).
- ``compile`` logs one run with the report, the program file and its prompts (``log_compile``).

The tracking URI is ``settings.mlflow_uri`` (default ``sqlite:///mlruns.db``). Artifacts of a
sqlite-tracked experiment go to ``mlartifacts/`` beside the database file, not into whatever the
working directory happens to be. ``make mlflow-ui`` serves the default store on 127.0.0.1. Every
``tune`` worker of a distributed study logs to the same URI (an MLflow server's ``http://...``).

``mlflow`` is imported inside the functions that log: it costs 2.6 s, which ``eval --no-mlflow``
and ``compile`` without tracking would pay for nothing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from reflect_sql.experiments.config import EvalConfig
from reflect_sql.files import atomic_file

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# Appending rows to the table downloads it first; a progress bar per question would bury the eval's own.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

TABLE = "questions.json"
RUNNING = ("running/ex", "running/lm_calls", "running/tokens", "running/seconds")
ABLATION_META = "ablation_run.json"


def git_commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if commit.returncode != 0:
        return "unknown"
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _artifact_location(uri: str) -> str | None:
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):]).resolve()
        return (db.parent / "mlartifacts").as_uri()
    return None


def _use_experiment(config: EvalConfig) -> str:
    """Point MLflow at the config's store and experiment (created on first use); its id."""
    import mlflow
    from mlflow.exceptions import MlflowException

    uri = config.settings.mlflow_uri
    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(config.mlflow_experiment) is None:
        try:
            mlflow.create_experiment(config.mlflow_experiment, artifact_location=_artifact_location(uri))
        except MlflowException:
            if mlflow.get_experiment_by_name(config.mlflow_experiment) is None:
                raise  # not another tuning worker creating it first
    return mlflow.set_experiment(config.mlflow_experiment).experiment_id


def _run_meta(out: str | Path) -> dict[str, Any]:
    try:
        meta = json.loads((Path(out) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def run_program(out: str | Path) -> dict[str, Any]:
    """The compiled program the run in ``out`` recorded (path, or "none", and sha256)."""
    program = _run_meta(out).get("program")
    return program if isinstance(program, dict) else {}


def program_params(program: dict[str, Any]) -> dict[str, Any]:
    return {"program": program.get("path"), "program_sha256": program.get("sha256"),
            "program_source": program.get("source")}


def session_commits(out: str | Path) -> list[str]:
    """The commits whose code evaluated questions of the run in ``out``, oldest first: a resumed run
    can span several, and the commit checked out when it is logged may be none of them."""
    sessions = _run_meta(out).get("sessions") or []
    commits: list[str] = []
    for session in sessions:
        commit = session.get("commit") if isinstance(session, dict) else None
        if commit and session.get("evaluated") and commit not in commits:
            commits.append(commit)
    return commits


def params_of(config: EvalConfig, commits: list[str] | None = None, program: dict[str, Any] | None = None) -> dict[str, Any]:
    s = config.settings
    params: dict[str, Any] = {f"settings.{k}": v for k, v in s.model_dump(mode="json").items()}
    params.update({
        "mode": config.mode,
        "generator_lm": s.lm,
        "judge_lm": s.effective_judge_lm,
        "kb": config.kb_enabled,
        "threads": config.threads,
        "git_commit": ",".join(commits) if commits else git_commit(),
        **{f"dataset.{k}": v for k, v in config.dataset.to_json().items()},
        **program_params(program or {}),
    })
    return {k: ("" if v is None else str(v))[:6000] for k, v in params.items()}


def metrics_of(summary: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in ("simple", "moderate", "challenging", "overall"):
        if summary.get(key) is not None:
            out[f"ex_{key}"] = float(summary[key])
    for key, count in (summary.get("counts") or {}).items():
        out[f"count_{key}"] = float(count)
    cost = summary.get("cost") or {}
    for key, value in (cost.get("per_question") or {}).items():
        if value is not None:
            out[f"{key}_per_question"] = float(value)
    for key in ("lm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "seconds"):
        if key in cost:
            out[f"total_{key}"] = float(cost[key])
    for key, value in (summary.get("recall") or {}).items():
        if value is not None:
            out[f"recall_{key}"] = float(value)
    out["errors"] = float(summary.get("errors") or 0)
    out["wall_seconds"] = float(summary.get("wall_seconds") or 0)
    return out


def table_row(record: dict[str, Any]) -> dict[str, Any]:
    """One question of the MLflow table: what it asked, what was answered, how it was judged and
    what it cost. Scalars only, so that the UI can sort and filter every column."""
    cost = record.get("cost") or {}
    trace = record.get("trace") or {}
    row: dict[str, Any] = {
        # As the dataset gives it: MLflow reads the table back with pandas' type inference before
        # appending to it, so a numeric id written as text would come back a number.
        "question_id": record.get("question_id"),
        "db_id": record.get("db_id"),
        "difficulty": record.get("difficulty"),
        "question": record.get("question"),
        "sql": record.get("sql"),
        "status": record.get("status"),
        "correct": bool(record.get("correct")),
        "error": record.get("error"),
    }
    # Every score gets its column, empty when not judged (a whole-schema context is never
    # retrieval-judged), so the table has the same columns whatever the variant.
    for key, value in (record.get("scores") or {}).items():
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        row[f"score_{key}"] = float(value) if numeric else None
    for key in ("lm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "lm_seconds", "seconds"):
        if key in cost:
            row[key] = cost[key]
    row["rounds"] = trace.get("rounds")
    if record.get("mlflow_trace_id"):
        row["trace_id"] = record["mlflow_trace_id"]
    return row


def status_of(exc: BaseException) -> str:
    """How a run that ``exc`` ended is marked: KILLED when it was stopped (Ctrl-C, a shutdown), else
    FAILED. The one place that tells the two apart, for evaluations, ablations and tuning trials."""
    return "KILLED" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else "FAILED"


def _existing_run(client: Any, run_id: str | None, experiment_id: str) -> Any:
    """The run ``run_id`` names, if it can be continued: it exists, is not deleted and belongs to
    this experiment (a run.json may name a run of another store or experiment)."""
    if not run_id:
        return None
    from mlflow.exceptions import MlflowException

    try:
        run = client.get_run(run_id)
    except MlflowException:
        return None
    if run.info.lifecycle_stage != "active" or run.info.experiment_id != experiment_id:
        return None
    return run


def enable_autolog(config: EvalConfig) -> None:
    """DSPy traces (every module and LM call) into the experiment, when the config asks for them."""
    if config.mlflow_enabled and config.mlflow_autolog:
        import mlflow

        _use_experiment(config)
        mlflow.dspy.autolog()


class EvalRun:
    """The MLflow run of one evaluation, live from its start to its end; ``experiments.runner.run_eval``
    drives it (``begin``, ``question`` after each question, then ``finish`` or ``abort``).

    ``nested``: a child of the active run (an ablation variant). ``attach_to``: log the running
    metrics and the table into a run someone else started and ends (a tuning trial); the run is
    then not recorded in run.json. ``table_every_s``: rows reach the MLflow table at most this
    often while the run goes (and all of them at its end); each append rewrites the table.
    """

    def __init__(self, config: EvalConfig, *, nested: bool = False, attach_to: str | None = None,
                 table_every_s: float = 10.0, traces: bool | None = None,
                 log: Callable[[str], None] | None = None):
        self.config = config
        self.nested = nested
        self.attach_to = attach_to
        self.table_every_s = table_every_s
        self.traces = config.mlflow_autolog if traces is None else traces
        self.log = log or (lambda message: print(f"reflect-sql: {message}", file=sys.stderr))
        self.run_id: str | None = attach_to
        self.active = False  # between begin and finish/abort, when there is something to log
        self.opened = False  # begin started the run or continued it (a finished one may stay closed)
        self._client: Any = None
        self._rows: list[dict[str, Any]] = []
        self._last_flush = 0.0
        self._warned = False
        self.done = self.correct = self.calls = self.tokens = 0

    # --- start ---------------------------------------------------------------------------

    def begin(self, out: Path, meta: dict[str, Any], done: list[dict[str, Any]], todo: int) -> None:
        """Start the run, or continue the one run.json names (``meta["mlflow"]``, updated here)."""
        import mlflow
        from mlflow.tracking import MlflowClient

        for record in done:
            self._count(record)
        if self.attach_to:
            self._client = MlflowClient()
            self.active = True
            self._rows = [table_row(r) for r in done]
            self._flush()
            return
        experiment_id = _use_experiment(self.config)
        self._client = client = MlflowClient()
        uri = self.config.settings.mlflow_uri
        recorded = meta.get("mlflow") if isinstance(meta.get("mlflow"), dict) else {}
        existing = _existing_run(client, recorded.get("run_id"), experiment_id) if recorded.get("tracking_uri") == uri else None
        if existing is not None and existing.info.status == "FINISHED" and not todo:
            self.run_id = existing.info.run_id  # nothing to add: the run stays as it ended
            return
        logged: set[str] = set()
        if existing is not None:
            self.run_id = existing.info.run_id
            try:
                logged = self._logged_ids()
            except ValueError as exc:  # a kill while the table was being written
                self.log(f"MLflow run {self.run_id}: its table {TABLE} is unreadable ({exc}); starting a new run")
                existing = None
        tags = {"kind": "evaluation", "out_dir": str(Path(out).resolve()), "questions": str(self.done + todo)}
        parent = mlflow.active_run() if self.nested else None
        if existing is not None and parent is not None:
            tags["mlflow.parentRunId"] = parent.info.run_id
        if existing is not None:
            run = mlflow.start_run(run_id=existing.info.run_id, nested=self.nested, tags=tags)
            self.log(f"MLflow run {run.info.run_id} continues ({uri})")
        else:
            run = mlflow.start_run(run_name=self.config.name, nested=self.nested, tags=tags)
            meta["mlflow"] = {"run_id": run.info.run_id, "experiment_id": experiment_id, "tracking_uri": uri}
            self.log(f"MLflow run {run.info.run_id} started ({uri})")
        self.run_id = run.info.run_id
        self.active = self.opened = True
        try:
            params = params_of(self.config, session_commits(out), meta.get("program"))
            if existing is not None:  # MLflow refuses to change a logged parameter
                params = {k: v for k, v in params.items() if k not in existing.data.params}
            if params:
                mlflow.log_params(params)
            self._rows = [table_row(r) for r in done if str(r.get("question_id")) not in logged]
            self._flush()
            if existing is None and self.done:
                self._log_running(sum(float(s.get("seconds") or 0) for s in meta.get("sessions", [])))
        except BaseException as exc:
            self.abort(exc)
            raise

    def _logged_ids(self) -> set[str]:
        """The question ids already in the run's table (a resumed run logged some before its kill)."""
        import tempfile

        import pandas as pd

        if TABLE not in {f.path for f in self._client.list_artifacts(self.run_id)}:
            return set()
        with tempfile.TemporaryDirectory() as tmp:
            path = self._client.download_artifacts(self.run_id, TABLE, tmp)
            table = pd.read_json(path, orient="split", dtype=False)
        return {str(v) for v in table.get("question_id", [])}

    # --- while it runs -------------------------------------------------------------------

    def _count(self, record: dict[str, Any]) -> None:
        cost = record.get("cost") or {}
        self.done += 1
        self.correct += bool(record.get("correct"))
        self.calls += int(cost.get("lm_calls") or 0)
        self.tokens += int(cost.get("prompt_tokens") or 0) + int(cost.get("completion_tokens") or 0)

    def call(self, question: Any, program: Callable[[], Any], traced: dict[str, Any]) -> Any:
        """Run one question's ``program`` (in its worker thread). With ``traces``: inside one MLflow
        trace whose root span is the question (inputs, the SQL and scores out) and whose children
        are DSPy's spans from autolog; ``traced["trace_id"]`` receives its id, for the table."""
        if not (self.active and self.traces):
            return program()
        import mlflow

        with mlflow.start_span(name=f"question {question.question_id}", span_type="CHAIN", run_id=self.run_id) as span:
            traced["trace_id"] = span.trace_id
            span.set_inputs({"question": question.question, "evidence": question.evidence})
            span.set_attributes({"question_id": str(question.question_id), "db_id": question.db_id,
                                 "difficulty": question.difficulty or ""})
            pred = program()
            span.set_outputs({"sql": getattr(pred, "sql", None), "scores": getattr(pred, "scores", None)})
            return pred

    def question(self, record: dict[str, Any], seconds: float) -> None:
        """One more question done; ``seconds``: the evaluation's wall seconds so far."""
        self._count(record)
        if not self.active:
            return
        self._rows.append(table_row(record))
        try:
            self._log_running(seconds)
            if time.monotonic() - self._last_flush >= self.table_every_s:
                self._flush()
        except Exception as exc:  # noqa: BLE001 - the store failing must not stop the evaluation
            if not self._warned:
                self._warned = True
                self.log(f"MLflow logging failed ({type(exc).__name__}: {exc}); the evaluation goes on")

    def _log_running(self, seconds: float) -> None:
        from mlflow.entities import Metric

        # EX in percent with two decimals, as the summary and the official evaluators print it.
        values = (round(100.0 * self.correct / self.done, 2) if self.done else 0.0, self.calls, self.tokens, round(seconds, 3))
        now = int(time.time() * 1000)
        self._client.log_batch(self.run_id, metrics=[Metric(key, float(value), now, self.done)
                                                     for key, value in zip(RUNNING, values)])

    def _flush(self) -> None:
        if self._rows:
            import pandas as pd

            self._client.log_table(self.run_id, pd.DataFrame(self._rows), TABLE)
            self._rows = []
        self._last_flush = time.monotonic()

    # --- end -----------------------------------------------------------------------------

    def finish(self, out: Path, summary: dict[str, Any]) -> None:
        """Log the final metrics and the artifacts, and end the run FINISHED."""
        if not self.active:
            return
        try:
            self._flush()
            if self.attach_to:
                self._end("FINISHED")
                return
            import mlflow

            out = Path(out)
            client, run_id = self._client, self.run_id
            mlflow.log_metrics(metrics_of(summary))
            client.set_tag(run_id, "git_commits", ",".join(session_commits(out)) or git_commit())
            for name in ("summary.json", "results.jsonl", "per_question.csv", "run.json", "calibration.md"):
                if (out / name).is_file():
                    mlflow.log_artifact(str(out / name))
            for path in sorted(out.glob("predict*")):
                mlflow.log_artifact(str(path), artifact_path="predictions")
            if (out / "charts").is_dir():
                mlflow.log_artifacts(str(out / "charts"), artifact_path="charts")
            if self.config.source is not None and Path(self.config.source).is_file():
                mlflow.log_artifact(str(self.config.source), artifact_path="config")
            mlflow.log_text(self.config.settings.to_yaml(), "config/effective_settings.yaml")
        except BaseException as exc:
            self.abort(exc)
            raise
        self._end("FINISHED")

    def abort(self, exc: BaseException) -> None:
        """End the run FAILED (an exception) or KILLED (Ctrl-C), with the rows it has."""
        if not self.active:
            return
        try:
            self._flush()
        except Exception:  # noqa: BLE001 - the run still gets its status
            pass
        self._end(status_of(exc))

    def _end(self, status: str) -> None:
        import mlflow

        self.active = False
        if self.traces:
            mlflow.flush_trace_async_logging()  # every question's trace is in the store when the run ends
        if self.attach_to:
            return  # the run's owner ends it
        active = mlflow.active_run()
        if active is not None and active.info.run_id == self.run_id:
            mlflow.end_run(status)
        else:
            self._client.set_terminated(self.run_id, status)


class AblationRun:
    """The parent run of an ablation: started (or continued, its id in ``<out>/ablation_run.json``)
    before the first variant, ended with the ablation's true status. A finished ablation resumed
    with nothing left to evaluate keeps the end time it had."""

    def __init__(self, config: EvalConfig, name: str, out: Path, log: Callable[[str], None] | None = None):
        self.config = config
        self.name = name
        self.out = Path(out)
        self.log = log or (lambda message: print(f"reflect-sql: {message}", file=sys.stderr))
        self.run_id: str | None = None
        self._previous_end: int | None = None

    def variant(self, config: EvalConfig, **kwargs: Any) -> EvalRun:
        return EvalRun(config, nested=True, log=self.log, **kwargs)

    def begin(self, params: dict[str, Any]) -> None:
        import mlflow
        from mlflow.tracking import MlflowClient

        experiment_id = _use_experiment(self.config)
        client = MlflowClient()
        uri = self.config.settings.mlflow_uri
        meta_path = self.out / ABLATION_META
        try:
            recorded = json.loads(meta_path.read_text(encoding="utf-8")).get("mlflow") or {}
        except (OSError, ValueError, AttributeError):
            recorded = {}
        existing = _existing_run(client, recorded.get("run_id"), experiment_id) if recorded.get("tracking_uri") == uri else None
        if existing is not None:
            if existing.info.status == "FINISHED":
                self._previous_end = existing.info.end_time
            run = mlflow.start_run(run_id=existing.info.run_id)
            params = {k: v for k, v in params.items() if k not in existing.data.params}
        else:
            run = mlflow.start_run(run_name=self.name, tags={"kind": "ablation"})
            with atomic_file(meta_path) as tmp:
                tmp.write_text(json.dumps({"name": self.name, "mlflow": {
                    "run_id": run.info.run_id, "experiment_id": experiment_id, "tracking_uri": uri}}, indent=2) + "\n",
                    encoding="utf-8")
        self.run_id = run.info.run_id
        self.log(f"MLflow ablation run {self.run_id} {'continues' if existing is not None else 'started'} ({uri})")
        if params:
            mlflow.log_params({k: str(v) for k, v in params.items()})

    def finish(self, reopened: bool) -> None:
        """Log the table and charts and end FINISHED; ``reopened``: some variant's run was started
        or continued in this session (else a finished parent keeps its end time)."""
        import mlflow

        for name in ("ablation.md", "ablation.json"):
            if (self.out / name).is_file():
                mlflow.log_artifact(str(self.out / name))
        if (self.out / "charts").is_dir():
            mlflow.log_artifacts(str(self.out / "charts"), artifact_path="charts")
        mlflow.end_run("FINISHED")
        if not reopened and self._previous_end is not None:
            from mlflow.tracking import MlflowClient

            MlflowClient().set_terminated(self.run_id, "FINISHED", end_time=self._previous_end)

    def abort(self, exc: BaseException) -> None:
        import mlflow

        active = mlflow.active_run()
        while active is not None and active.info.run_id != self.run_id:
            mlflow.end_run(status_of(exc))  # a variant run the error left open
            active = mlflow.active_run()
        if active is not None:
            mlflow.end_run(status_of(exc))


# --- tuning -------------------------------------------------------------------------------------


def _quoted(value: str) -> str:
    return f"'{value}'" if "'" not in value else f'"{value}"'


def close_stale_runs(experiment_id: str, run_name: str, study_tags: dict[str, str]) -> int:
    """Mark KILLED the parent runs of this very study (``study_tags``: its name and storage) that a
    killed tuning process left RUNNING, with their trial runs: a study resumes in a new parent run,
    and the UI would show the old one running forever. Only for a study one process owns (a sqlite
    study under its lock): no live process owns them then; a study of the same name elsewhere is
    not touched."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    tags = " and ".join(f"tags.{key} = {_quoted(value)}" for key, value in study_tags.items())
    stale = client.search_runs([experiment_id], f"attributes.run_name = {_quoted(run_name)} and {tags} "
                                                 "and attributes.status = 'RUNNING'")
    closed = 0
    for parent in stale:
        children = client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}' "
                                                       "and attributes.status = 'RUNNING'")
        for run in [*children, parent]:
            client.set_terminated(run.info.run_id, status="KILLED")
            closed += 1
    return closed


TRIAL_RUN, WORKER_RUN = "mlflow_run_id", "mlflow_worker_run_id"  # a trial's user attributes


class StudyRun:
    """The MLflow runs of one ``tune`` process: a parent run for the process, a nested run per
    trial; a no-op when disabled. Each trial records its run's and its parent's id in the trial's
    user attributes (``TRIAL_RUN``, ``WORKER_RUN``), so a worker that finds the trial stale can
    mark them KILLED (``kill_runs_of``)."""

    def __init__(self, config: EvalConfig, enabled: bool, run_name: str, study_tags: dict[str, str],
                 close_stale: bool):
        self.config = config
        self.enabled = enabled
        self.parent = None
        self.closed_stale = 0
        if enabled:
            import mlflow

            experiment_id = _use_experiment(config)
            if close_stale:
                self.closed_stale = close_stale_runs(experiment_id, run_name, study_tags)
            self.parent = mlflow.start_run(run_name=run_name, tags=study_tags)

    @contextmanager
    def trial(self, name: str, params: dict[str, Any], attrs: Callable[[str, str], None]) -> Iterator[None]:
        """The trial's nested run, from the trial's start (with its parameters) to its true end;
        ``attrs(key, value)`` records the run ids on the trial."""
        if not self.enabled:
            yield
            return
        import mlflow

        run = mlflow.start_run(run_name=name, nested=True, tags={"kind": "trial"})
        attrs(TRIAL_RUN, run.info.run_id)
        attrs(WORKER_RUN, self.parent.info.run_id)
        status = "FAILED"
        try:
            mlflow.log_params(params)
            yield
            status = "FINISHED"
        except BaseException as exc:
            status = status_of(exc)
            raise
        finally:
            mlflow.end_run(status)

    def live(self, config: EvalConfig) -> EvalRun | None:
        """The running metrics and question table of the trial's evaluation, in the trial's run."""
        if not self.enabled:
            return None
        import mlflow

        return EvalRun(config, attach_to=mlflow.active_run().info.run_id, traces=False)

    def log_step(self, key: str, value: float, step: int) -> None:
        """A metric of the parent run (the study), while a trial's run is the active one."""
        if self.enabled and self.parent is not None:
            from mlflow.tracking import MlflowClient

            MlflowClient().log_metric(self.parent.info.run_id, key, float(value), step=step)

    def log_params(self, params: dict) -> None:
        if self.enabled:
            import mlflow

            mlflow.log_params(params)

    def log_metrics(self, metrics: dict) -> None:
        if self.enabled:
            import mlflow

            mlflow.log_metrics({k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))})

    def log_artifacts(self, paths: list[Path | None]) -> None:
        if self.enabled:
            import mlflow

            for p in paths:
                if p is not None and Path(p).is_file():
                    mlflow.log_artifact(str(p))

    def end(self, status: str = "FINISHED") -> None:
        if self.enabled and self.parent is not None:
            import mlflow

            active = mlflow.active_run()
            while active is not None and active.info.run_id != self.parent.info.run_id:
                mlflow.end_run(status)  # a trial run an error left open
                active = mlflow.active_run()
            mlflow.end_run(status=status)

    def kill_runs_of(self, user_attrs: dict[str, Any]) -> int:
        """Mark KILLED the runs of a trial whose worker died (its heartbeat went stale): the trial's
        run and the worker's parent run, if they are still RUNNING."""
        if not self.enabled:
            return 0
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        client, killed = MlflowClient(), 0
        for key in (TRIAL_RUN, WORKER_RUN):
            run_id = user_attrs.get(key)
            try:
                if run_id and client.get_run(run_id).info.status == "RUNNING":
                    client.set_terminated(run_id, status="KILLED")
                    killed += 1
            except MlflowException:
                pass  # a run of another store (the trial ran with another tracking URI)
        return killed


# --- compile ------------------------------------------------------------------------------------


def log_compile(experiment: EvalConfig, out: Path, metadata: dict[str, Any], prompts_markdown: str) -> None:
    """One run for a ``compile``: its options, the held-out measures before and after, the
    program file and its prompts as markdown."""
    import mlflow

    _use_experiment(experiment)
    with mlflow.start_run(run_name=f"compile:{out.stem}", tags={"kind": "compile"}):
        mlflow.log_params({"optimizer": metadata["optimizer"], "mode": metadata["mode"], "lm": metadata["lm"],
                           "command": (metadata["command"] or "")[:6000],
                           "targets": ",".join(metadata["targets"]), "train_questions": len(metadata["train"]["questions"]),
                           "train_dataset": json.dumps(metadata["train"]["dataset"])})
        for target, entry in metadata["report"]["targets"].items():
            for phase in ("before", "after"):
                m = entry.get(phase) or {}
                if m.get("accuracy") is not None:
                    mlflow.log_metric(f"{target}.{phase}.accuracy", m["accuracy"])
                if m.get("auc") is not None:
                    mlflow.log_metric(f"{target}.{phase}.auc", m["auc"])
        mlflow.log_artifact(str(out))
        mlflow.log_text(prompts_markdown, f"{out.stem}.prompts.md")
