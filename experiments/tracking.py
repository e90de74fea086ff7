"""MLflow: one run per evaluation (params, metrics, artifacts); ablation variants as nested runs.

The tracking URI is ``settings.mlflow_uri`` (default ``sqlite:///mlruns.db``). Artifacts of a
sqlite-tracked experiment go to ``mlartifacts/`` beside the database file, not into whatever the
working directory happens to be. ``make mlflow-ui`` serves the default store on 127.0.0.1.
"""
from __future__ import annotations

import json
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from reflect_sql.experiments.config import EvalConfig

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


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


def _use_experiment(config: EvalConfig) -> None:
    import mlflow

    uri = config.settings.mlflow_uri
    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(config.mlflow_experiment) is None:
        mlflow.create_experiment(config.mlflow_experiment, artifact_location=_artifact_location(uri))
    mlflow.set_experiment(config.mlflow_experiment)


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


def enable_autolog(config: EvalConfig) -> None:
    """DSPy traces (every module and LM call) into the experiment, when the config asks for them."""
    if config.mlflow_enabled and config.mlflow_autolog:
        import mlflow

        _use_experiment(config)
        mlflow.dspy.autolog()


@contextmanager
def parent_run(config: EvalConfig, name: str) -> Iterator[Any]:
    """The run that nests the runs of an ablation's variants."""
    import mlflow

    _use_experiment(config)
    with mlflow.start_run(run_name=name, tags={"kind": "ablation"}) as run:
        yield run


def log_eval(config: EvalConfig, out: str | Path, summary: dict[str, Any], *, nested: bool = False) -> str:
    """Log a finished evaluation; returns the MLflow run id."""
    import mlflow

    out = Path(out)
    _use_experiment(config)
    with mlflow.start_run(run_name=config.name, nested=nested,
                          tags={"kind": "evaluation", "out_dir": str(out.resolve())}) as run:
        mlflow.log_params(params_of(config, session_commits(out), run_program(out)))
        mlflow.log_metrics(metrics_of(summary))
        for name in ("summary.json", "results.jsonl", "per_question.csv", "run.json", "calibration.md"):
            if (out / name).is_file():
                mlflow.log_artifact(str(out / name))
        for path in sorted(out.glob("predict*")):
            mlflow.log_artifact(str(path), artifact_path="predictions")
        if (out / "charts").is_dir():
            mlflow.log_artifacts(str(out / "charts"), artifact_path="charts")
        if config.source is not None and Path(config.source).is_file():
            mlflow.log_artifact(str(config.source), artifact_path="config")
        mlflow.log_text(config.settings.to_yaml(), "config/effective_settings.yaml")
        return run.info.run_id
