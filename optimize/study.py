"""``reflect-sql tune``: an Optuna study over the paper's thresholds and weights (section 7 grid-searched
them), with execution accuracy on a tuning split as the objective.

- Storage is sqlite and the study is resumable: rerunning the same command tops the study up to
  ``trials`` completed trials. A trial cut short (Ctrl-C, or a killed process that left it
  RUNNING) is re-queued with the same parameters, and its per-question results resume, because
  each trial evaluates into ``trials/<fingerprint of its settings>/`` through the experiments
  runner: the same settings always land in the same directory. One process tunes a study at a
  time (a file lock beside the sqlite database): a second one is refused, because it would take
  the first one's running trial for an interrupted one.
- Samplers are seeded; TPE starts modelling after half the trials (at most Optuna's 10), and
  NSGA-II's population is half the trials (at least 4). A resumed study reseeds with ``seed + trials so far``: a sampler restarted
  on its first seed would replay the random start-up points already evaluated.
- Single objective: maximise EX (TPE). Multi-objective: maximise EX and minimise LM calls per
  question (NSGA-II); the Pareto front is written to ``pareto.json`` and ``pareto_front.png``.
- LM calls go through the DSPy cache (``lm_cache``, one cache dir for every trial), so a threshold
  that only changes control flow replays the calls it shares with earlier trials for free.
- Each trial is a nested MLflow run under one run per invocation, started when the trial starts
  with its parameters; it holds the trial's running metrics and per-question table (the live
  ``experiments.tracking.EvalRun``, attached to it) and ends FINISHED, FAILED or KILLED (Ctrl-C),
  as does the parent. The parent logs ``trial_ex`` per trial and the study's ``best_ex`` whenever
  it improves, both with ``step`` = trial number.
- Trial 0 of a new study runs the configured settings (``start_from_config``), so the result
  shows the baseline EX next to the best one.
- The best trial is written as ``best_settings.yaml`` (a settings file: ``--config`` of ``ask``)
  and ``best_config.yaml`` (an experiment config extending the original: ``reflect-sql eval`` takes
  it), plus ``optimization_history.png`` and ``param_importances.png``.
- Trials run the compiled program ``--program`` resolves (``programs.shipped``; by default the one
  shipped for the generator LM). The study records it (path and sha256) and a resumed study must
  run the same one; ``best_config.yaml`` names it.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator

import optuna
import yaml

from reflect_sql.errors import UserError
from reflect_sql.experiments.config import EvalConfig
from reflect_sql.experiments.runner import ProgramFactory, run_eval
from reflect_sql.experiments.tracking import EvalRun, program_params
from reflect_sql.optimize.config import TuneOptions, with_dataset
from reflect_sql.optimize.search_space import TUNED_KEYS, params_from_settings, settings_from_params, suggest_params
from reflect_sql.programs.shipped import ProgramChoice, resolve_program
from reflect_sql.settings import Settings

FactoryFor = Callable[[EvalConfig, Path], ProgramFactory]
_INTERRUPTED = "interrupted"
_PROGRAM = "program"


@dataclass
class TuneResult:
    study_name: str
    storage: str
    out: Path
    completed: int
    best: list[dict[str, Any]]  # one entry, or the Pareto front
    best_settings_path: Path | None
    best_config_path: Path | None
    plots: dict[str, str | None]  # name -> path, or why it was skipped
    seconds: float


def default_out(study_name: str) -> Path:
    return Path("runs") / "tune" / study_name


def startup_trials(target: int) -> int:
    """Random trials before TPE models the results: Optuna's 10 would leave a 10-trial study random."""
    return max(3, min(10, target // 2))


def make_sampler(multi_objective: bool, seed: int, target: int = 20) -> optuna.samplers.BaseSampler:
    if multi_objective:
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, target // 2)))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials(target))


def open_study(name: str, storage: str, multi_objective: bool, seed: int, target: int = 20) -> optuna.Study:
    directions = ["maximize", "minimize"] if multi_objective else ["maximize"]
    try:
        study = optuna.create_study(study_name=name, storage=storage, directions=directions,
                                    sampler=make_sampler(multi_objective, seed, target), load_if_exists=True)
    except ValueError as exc:
        raise UserError(f"cannot open study {name!r} in {storage}: {exc}") from None
    if [d.name for d in study.directions] != [d.upper() for d in directions]:
        raise UserError(f"study {name!r} in {storage} was created {'multi' if len(study.directions) > 1 else 'single'}"
                        "-objective; use another --study name to change that")
    if study.trials:
        study.sampler = make_sampler(multi_objective, seed + len(study.trials), target)
    return study


def requeue_interrupted(study: optuna.Study) -> int:
    """Fail trials a killed process left RUNNING; queue again every interrupted trial's parameters
    that no finished or waiting trial covers. One tuning process per study at a time."""
    S = optuna.trial.TrialState
    for t in study.get_trials(deepcopy=False, states=(S.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, _INTERRUPTED, True)
        study._storage.set_trial_state_values(t._trial_id, S.FAIL)
    # A waiting trial has no params yet, only the ones fixed for it when it was queued.
    covered = [t.params or t.system_attrs.get("fixed_params") or {}
               for t in study.get_trials(deepcopy=False, states=(S.COMPLETE, S.WAITING))]
    queued = 0
    for t in study.get_trials(deepcopy=False, states=(S.FAIL,)):
        if t.user_attrs.get(_INTERRUPTED) and t.params and t.params not in covered:
            keep = {k: v for k, v in t.user_attrs.items() if k == "baseline"}
            study.enqueue_trial(t.params, user_attrs=keep or None)
            covered.append(t.params)
            queued += 1
    return queued


def check_study_program(study: optuna.Study, choice: ProgramChoice, storage: str) -> None:
    """A study records the compiled program its trials run (sha256); a resumed study must run the
    same one, or its trials would compare two programs as if they were one."""
    recorded = study.user_attrs.get(_PROGRAM)
    if recorded is None:
        if not study.trials:
            study.set_user_attr(_PROGRAM, choice.to_json())
        return
    if recorded.get("sha256") != choice.sha256:
        raise UserError(f"study {study.study_name!r} in {storage} runs program {recorded.get('path')} "
                        f"(sha256 {(recorded.get('sha256') or 'none')[:12]}), not {choice.to_json()['path']} "
                        f"(sha256 {(choice.sha256 or 'none')[:12]}); resume it with --program {recorded.get('path')}, "
                        "or use another --study")


def _completed(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def _trial_out(out: Path, config: EvalConfig) -> Path:
    return out / "trials" / config.fingerprint()


def _quoted(value: str) -> str:
    return f"'{value}'" if "'" not in value else f'"{value}"'


def close_stale_runs(experiment_id: str, run_name: str, study_tags: dict[str, str]) -> int:
    """Mark KILLED the parent runs of this very study (``study_tags``: its name and storage) that a
    killed tuning process left RUNNING, with their trial runs: a study resumes in a new parent run,
    and the UI would show the old one running forever. Called under the study lock of a sqlite
    study, so no live process owns them; a study of the same name elsewhere is not touched."""
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


class _MLflow:
    """One parent run per invocation, one nested run per trial; a no-op when disabled."""

    def __init__(self, enabled: bool, uri: str, experiment: str, run_name: str, study_tags: dict[str, str],
                 close_stale: bool):
        self.enabled = enabled
        self.parent = None
        self.closed_stale = 0
        if enabled:
            os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
            import mlflow

            mlflow.set_tracking_uri(uri)
            experiment_id = mlflow.set_experiment(experiment).experiment_id
            if close_stale:
                self.closed_stale = close_stale_runs(experiment_id, run_name, study_tags)
            self.parent = mlflow.start_run(run_name=run_name, tags=study_tags)

    @contextmanager
    def trial(self, name: str, params: dict[str, Any]) -> Iterator[None]:
        """The trial's nested run, from the trial's start (with its parameters) to its true end."""
        if not self.enabled:
            yield
            return
        import mlflow

        mlflow.start_run(run_name=name, nested=True, tags={"kind": "trial"})
        status = "FAILED"
        try:
            mlflow.log_params(params)
            yield
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
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

    def log_artifacts(self, paths: list[Path]) -> None:
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


def trial_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    per_q = (summary.get("cost") or {}).get("per_question") or {}
    return {
        "ex": float(summary.get("overall") or 0.0),
        "lm_calls_per_question": float(per_q.get("lm_calls") or 0.0),
        "prompt_tokens_per_question": float(per_q.get("prompt_tokens") or 0.0),
        "seconds_per_question": float(per_q.get("seconds") or 0.0),
        "questions": int(summary.get("finished") or 0),
        "errors": int(summary.get("errors") or 0),
    }


def _describe(trial: optuna.trial.FrozenTrial, base: Settings) -> dict[str, Any]:
    settings = settings_from_params(trial.params, base)
    return {
        "trial": trial.number,
        "values": list(trial.values),
        "ex": trial.user_attrs.get("ex", trial.values[0]),
        "lm_calls_per_question": trial.user_attrs.get("lm_calls_per_question"),
        "settings": {k: getattr(settings, k) for k in TUNED_KEYS},
    }


def _pick_best(study: optuna.Study, multi_objective: bool) -> tuple[optuna.trial.FrozenTrial, list[optuna.trial.FrozenTrial]]:
    if not multi_objective:
        # Ties on EX go to the cheaper trial, then the earlier one: reproducible and frugal.
        done = _completed(study)
        best = max(done, key=lambda t: (t.values[0], -(t.user_attrs.get("lm_calls_per_question") or 0), -t.number))
        return best, [best]
    front = sorted(study.best_trials, key=lambda t: (-t.values[0], t.values[1], t.number))
    return front[0], front


def write_best(study: optuna.Study, config: EvalConfig, out: Path, multi_objective: bool) -> tuple[Path, Path, list[dict]]:
    best, front = _pick_best(study, multi_objective)
    settings = settings_from_params(best.params, config.settings)
    header = (f"# Tuned by `reflect-sql tune`: study {study.study_name}, trial {best.number}, "
              f"EX {best.user_attrs.get('ex', best.values[0]):.2f}% on {best.user_attrs.get('questions', '?')} tuning questions.\n")
    settings_path = out / "best_settings.yaml"
    settings_path.write_text(header + settings.to_yaml(), encoding="utf-8")

    best_config = {"name": f"{config.name}-tuned"}
    if config.source is not None:
        best_config["extends"] = os.path.relpath(Path(config.source).resolve(), out.resolve())
    else:  # no file to extend: carry the experiment's own sections
        best_config.update({k: v for k, v in config.raw.items() if k not in ("name", "settings")})
    # Every setting, not only the tuned ones: --set overrides given to tune are part of what was measured.
    best_config["settings"] = settings.model_dump(mode="json")
    program = study.user_attrs.get(_PROGRAM) or {}
    if program.get("path"):
        header += (f"# Trials ran program {program['path']} (sha256 {program.get('sha256') or 'none'}): "
                   f"evaluate with --program {program['path']}.\n")
    config_path = out / "best_config.yaml"
    config_path.write_text(
        header + "# The dataset comes from the extended config: evaluate on questions the study did not tune on.\n"
        + yaml.safe_dump(best_config, sort_keys=False, allow_unicode=True), encoding="utf-8")

    described = [_describe(t, config.settings) for t in front]
    if multi_objective:
        (out / "pareto.json").write_text(json.dumps(described, indent=2) + "\n", encoding="utf-8")
    return settings_path, config_path, described


def save_plots(study: optuna.Study, out: Path, multi_objective: bool) -> dict[str, str | None]:
    """PNG charts; a chart that cannot be drawn yet (too few trials) is skipped with the reason."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from optuna.visualization import matplotlib as ovm

    ex = (lambda t: t.values[0]) if multi_objective else None
    charts: dict[str, Callable[[], Any]] = {
        "optimization_history": lambda: ovm.plot_optimization_history(study, target=ex, target_name="EX (%)"),
        "param_importances": lambda: ovm.plot_param_importances(study, target=ex, target_name="EX (%)"),
    }
    if multi_objective:
        charts["pareto_front"] = lambda: ovm.plot_pareto_front(study, target_names=["EX (%)", "LM calls / question"])
    done = _completed(study)
    plots: dict[str, str | None] = {}
    for name, draw in charts.items():
        if name == "param_importances" and len({t.values[0] for t in done}) < 2:
            plots[name] = f"skipped: needs at least 2 completed trials with different EX (have {len(done)} completed)"
            continue
        path = out / f"{name}.png"
        try:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna marks its matplotlib backend experimental
                axes = draw()
            figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
            figure.tight_layout()
            figure.savefig(path, dpi=110)
            plt.close(figure)
            plots[name] = str(path)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            plots[name] = f"skipped: {exc}"
    return plots


def _pipeline_factories(program: ProgramChoice) -> FactoryFor:
    lms: tuple | None = None

    def make(trial_config: EvalConfig, trial_dir: Path) -> ProgramFactory:
        nonlocal lms
        from reflect_sql.experiments.pipeline import PipelineFactory
        from reflect_sql.lm.factory import configure_lms

        if lms is None:  # tuned keys never touch the LM settings, so one pair serves every trial
            lms = configure_lms(trial_config.settings)
        return PipelineFactory(trial_config, trial_dir, program=program, lms=lms)

    return make


def sqlite_storage_file(storage: str) -> Path | None:
    """The database file of a sqlite storage URL, resolved (``?timeout=30`` names the same file);
    None for a server storage."""
    if not storage.startswith("sqlite:///"):
        return None
    return Path(storage[len("sqlite:///"):].split("?", 1)[0]).resolve()


def study_lock_path(storage: str, name: str, out: Path) -> Path:
    """Beside a sqlite study's database, so that every process on that file meets the same lock,
    whatever its --out; in ``out`` for a server storage (processes elsewhere do not see it)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    db = sqlite_storage_file(storage)
    if db is not None:
        return db.parent / f"{db.name}.{safe}.lock"
    return out / f".{safe}.lock"


@contextmanager
def study_lock(storage: str, name: str, out: Path) -> Iterator[None]:
    """One tuning process per study: a second one would take the first's running trial for an
    interrupted one, fail it and queue it again (``requeue_interrupted``)."""
    path = study_lock_path(storage, name, out)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise UserError(f"study {name!r} in {storage} is being tuned by another process (pid {holder}); "
                            "one process per study at a time: wait for it, or stop it and rerun to resume") from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_study(
    config: EvalConfig,
    options: TuneOptions,
    *,
    factory_for: FactoryFor | None = None,
    trials: int | None = None,
    study_name: str | None = None,
    out: Path | None = None,
    progress: bool = False,
    log: Callable[[str], None] = lambda _: None,
    program: str | Path | None = None,
) -> TuneResult:
    """Top the study up to ``trials`` completed trials on the tuning split and write its outputs.

    ``factory_for(trial_config, trial_dir)`` gives the runner's program factory for a trial;
    by default the experiments pipeline, on LMs built once for the whole study (the embedded
    model loads once), running the compiled ``program`` (``--program``; None: the one shipped for
    the generator LM). Tests pass one that builds programs on a scripted LM. A study keeps the
    program it started with: resuming it with another one is refused.
    """
    started = time.perf_counter()
    name = study_name or options.study or f"{config.name}-tune"
    out = Path(out or options.out or default_out(name))
    out.mkdir(parents=True, exist_ok=True)
    storage = options.storage or f"sqlite:///{(out / 'optuna.db').resolve()}"
    target = trials if trials is not None else options.trials
    tuning = with_dataset(config, options.dataset)
    multi = options.multi_objective

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Only a sqlite study's lock covers every process that could own its runs; on a server storage a
    # live process elsewhere might, so its stale runs are left for the user to close.
    storage_file = sqlite_storage_file(storage)
    storage_id = f"sqlite:///{storage_file}" if storage_file is not None else storage.split("?", 1)[0]
    choice = resolve_program(program, tuning.settings.lm)
    with study_lock(storage, name, out):
        factory_for = factory_for or _pipeline_factories(choice)
        study = open_study(name, storage, multi, options.seed, target)
        check_study_program(study, choice, storage)
        if not study.trials and options.start_from_config:
            # Trial 0 runs the configured settings: the baseline the tuned EX is compared with.
            study.enqueue_trial(params_from_settings(tuning.settings), user_attrs={"baseline": True})
        queued = requeue_interrupted(study)
        if queued:
            log(f"re-queued {queued} interrupted trial(s) with their parameters")
        remaining = max(0, target - len(_completed(study)))
        log(f"study {name}: {len(_completed(study))} completed, running {remaining} more ({storage})")

        tracker = _MLflow(config.mlflow_enabled and remaining > 0, config.settings.mlflow_uri,
                          config.mlflow_experiment, f"tune:{name}", {"study": name, "study_storage": storage_id},
                          close_stale=storage_file is not None)
        if tracker.closed_stale:
            log(f"marked KILLED {tracker.closed_stale} MLflow run(s) of this study that a killed process left RUNNING")
        status = "FAILED"
        try:
            if remaining:
                tracker.log_params({"study": name, "storage": storage, "target_trials": target, "seed": options.seed,
                                    "multi_objective": multi, "dataset": json.dumps(tuning.dataset.to_json()),
                                    **program_params(choice.to_json())})
            done = _completed(study)
            best_ex = max((t.values[0] for t in done), default=None)
            if best_ex is not None:  # the best so far of a resumed study, where its chart goes on
                tracker.log_step("best_ex", best_ex, max(t.number for t in done))

            def objective(trial: optuna.Trial):
                nonlocal best_ex
                settings = settings_from_params(suggest_params(trial), tuning.settings)
                trial_config = replace(tuning, settings=settings, name=f"{name}-trial{trial.number}")
                trial_dir = _trial_out(out, trial_config)
                trial.set_user_attr("out", str(trial_dir))
                with tracker.trial(f"trial-{trial.number}",
                                   {"trial": trial.number, **{k: getattr(settings, k) for k in TUNED_KEYS}}):
                    factory = factory_for(trial_config, trial_dir)
                    try:
                        summary = run_eval(trial_config, trial_dir, factory, progress=progress,
                                           tracker=tracker.live(trial_config))
                    except KeyboardInterrupt:
                        trial.set_user_attr(_INTERRUPTED, True)
                        raise
                    finally:
                        close = getattr(factory, "close", None)
                        if close is not None:
                            close()
                    metrics = trial_metrics(summary)
                    for key, value in metrics.items():
                        trial.set_user_attr(key, value)
                    tracker.log_metrics(metrics)
                    tracker.log_step("trial_ex", metrics["ex"], trial.number)
                    if best_ex is None or metrics["ex"] > best_ex:
                        best_ex = metrics["ex"]
                        tracker.log_step("best_ex", best_ex, trial.number)
                log(f"trial {trial.number}: EX {metrics['ex']:.2f}%, {metrics['lm_calls_per_question']:.2f} LM calls/question")
                if multi:
                    return metrics["ex"], metrics["lm_calls_per_question"]
                return metrics["ex"]

            if remaining:
                study.optimize(objective, n_trials=remaining)
            completed = _completed(study)
            settings_path = config_path = None
            best: list[dict] = []
            if completed:
                settings_path, config_path, best = write_best(study, config, out, multi)
            plots = save_plots(study, out, multi) if completed else {}
            tracker.log_artifacts([settings_path, config_path, *(Path(p) for p in plots.values() if p and p.endswith(".png"))])
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        finally:
            tracker.end(status)
        return TuneResult(name, storage, out, len(completed), best, settings_path, config_path, plots,
                          round(time.perf_counter() - started, 3))


