"""``reflect-sql tune``: an Optuna study over the paper's thresholds and weights (section 7 grid-searched
them), with execution accuracy on a tuning split as the objective.

- The study lives in Optuna's RDB storage: by default a sqlite file in ``out`` (one process at a
  time, ``study_lock``), or a server database (``--storage postgresql://...``) that any number of
  ``tune`` processes, on one machine or many, share as workers. Rerunning the same command tops the
  study up to ``trials`` completed trials; each worker stops when the study has them.
- Trials are never run twice: Optuna hands each queued trial to one worker, and a worker that would
  start a trial beyond the target (another worker got there first) drops it as PRUNED before it
  evaluates anything. A worker whose trials are all taken waits for the running ones to end.
- Every trial records Optuna's heartbeat. A trial whose worker was killed goes silent; after
  ``grace_s`` a worker finds it stale and Optuna's ``RetryHeartbeatStaleTrialCallback`` queues it
  again with its parameters (at most ``trial_retries`` times). A trial interrupted in this process
  (Ctrl-C) is failed and queued the same way at once. The retry resumes the per-question results,
  because each trial evaluates into ``trials/<fingerprint of its settings>/`` through the
  experiments runner: the same settings always land in the same directory.
- Samplers are seeded; TPE starts modelling after half the trials (at most Optuna's 10), and
  NSGA-II's population is half the trials (at least 4). A resumed study reseeds with ``seed + trials
  so far``: a sampler restarted on its first seed would replay the random start-up points already
  evaluated. Workers of a server study also mix in their host and pid (else two workers started
  together would draw the same points), and TPE lies that running trials scored badly so that
  parallel workers do not crowd one region (``constant_liar``): a parallel study is not replayable.
- Single objective: maximise EX (TPE). Multi-objective: maximise EX and minimise LM calls per
  question (NSGA-II); the Pareto front is written to ``pareto.json`` and ``pareto_front.png``.
- LM calls go through the DSPy cache (``lm_cache``, one cache dir for every trial), so a threshold
  that only changes control flow replays the calls it shares with earlier trials for free.
- MLflow (``experiments.tracking.StudyRun``): one parent run per worker, a nested run per trial
  holding its running metrics and question table; every worker logs to ``settings.mlflow_uri``.
  The parent logs ``trial_ex`` per trial and ``best_ex`` whenever the study's best improves, both
  with ``step`` = trial number.
- Trial 0 of a new study runs the configured settings (``start_from_config``): the worker that
  creates the study queues it, so the result shows the baseline EX next to the best one.
- Outputs (``study_outputs``): ``best_settings.yaml``, ``best_config.yaml``, the charts.
- Trials run the compiled program ``--program`` resolves (``programs.shipped``; by default the one
  shipped for the generator LM). The study records it (path and sha256) and a resumed study must
  run the same one; ``best_config.yaml`` names it.

A shutdown (Ctrl-C; SIGTERM once a handler raises for it in the main thread) is whatever
``experiments.tracking.status_of`` calls KILLED: the trial in flight is failed and queued again
(``retry_interrupted``), its MLflow run and the worker's end KILLED, and the sqlite lock is released.
"""
from __future__ import annotations

import json
import os
import socket
import time
import warnings
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback, fail_stale_trials
from optuna.trial import TrialState
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError

from reflect_sql.errors import UserError
from reflect_sql.experiments.config import EvalConfig
from reflect_sql.experiments.pipeline import PipelineFactory
from reflect_sql.experiments.runner import ProgramFactory, run_eval
from reflect_sql.experiments.tracking import StudyRun, program_params, status_of
from reflect_sql.optimize.config import TuneOptions, with_dataset
from reflect_sql.optimize.search_space import TUNED_KEYS, params_from_settings, settings_from_params, suggest_params
from reflect_sql.optimize.study_lock import sqlite_storage_file, study_lock
from reflect_sql.optimize.study_outputs import PROGRAM, completed, save_plots, trial_metrics, write_best
from reflect_sql.programs.shipped import ProgramChoice, resolve_program

FactoryFor = Callable[[EvalConfig, Path], ProgramFactory]
WORKER = f"{socket.gethostname()}:{os.getpid()}"  # this process, as trials and MLflow name it
# Optuna marks the heartbeat, its retry callback and constant_liar experimental; they are what we use.
warnings.filterwarnings("ignore", category=ExperimentalWarning)


@dataclass
class TuneResult:
    study_name: str
    storage: str  # as shown: a server URL's password is masked
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


def make_sampler(multi_objective: bool, seed: int, target: int = 20, parallel: bool = False) -> optuna.samplers.BaseSampler:
    if multi_objective:
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(50, target // 2)))
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup_trials(target), constant_liar=parallel)


# --- storage ------------------------------------------------------------------------------------


def shown_storage(storage: str) -> str:
    """The storage URL as logs, MLflow and results show it: a server URL's password masked."""
    if sqlite_storage_file(storage) is not None:
        return storage
    try:
        return make_url(storage).render_as_string(hide_password=True)
    except ArgumentError:
        return storage


def storage_id(storage: str) -> str:
    """One name per study database, whatever the spelling (``?timeout=30``, a password)."""
    db = sqlite_storage_file(storage)
    return f"sqlite:///{db}" if db is not None else shown_storage(storage).split("?", 1)[0]


def _engine_url(storage: str) -> str:
    """PostgreSQL through psycopg 3, the driver the project installs (SQLAlchemy's default is psycopg2)."""
    for prefix in ("postgresql://", "postgres://"):
        if storage.startswith(prefix):
            return "postgresql+psycopg://" + storage[len(prefix):]
    return storage


class TrialRetry:
    """What becomes of a trial whose worker is gone: ``on_stale`` sees it (the tracker closes its
    MLflow runs), then Optuna's retry callback queues it again with its parameters."""

    def __init__(self, max_retry: int):
        self.retry = RetryHeartbeatStaleTrialCallback(max_retry=max_retry)
        self.on_stale: Callable[[optuna.trial.FrozenTrial], Any] | None = None

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if self.on_stale is not None:
            self.on_stale(trial)
        self.retry(study, trial)


def open_storage(storage: str, options: TuneOptions) -> tuple[RDBStorage, TrialRetry]:
    """Optuna's RDB storage with trial heartbeats and the retry of stale trials."""
    retry = TrialRetry(options.trial_retries)
    for attempt in (1, 2):
        try:
            rdb = RDBStorage(_engine_url(storage), heartbeat_interval=options.heartbeat_s,
                             grace_period=options.grace_s, heartbeat_stale_trial_callback=retry)
            return rdb, retry
        except (IntegrityError, optuna.exceptions.StorageInternalError) as exc:
            # Workers started together on an empty database both create Optuna's tables and its
            # version row; the loser's insert collides with the winner's, whose tables are then
            # there to use. Optuna raises the version row's collision wrapped in its own error.
            collided = isinstance(exc, IntegrityError) or isinstance(exc.__cause__, IntegrityError)
            if attempt == 2 or not collided:
                raise
            time.sleep(1.0)
        except (ArgumentError, SQLAlchemyError, ValueError, ImportError) as exc:
            first = " ".join(str(exc).split())[:300]
            raise UserError(f"cannot open the study storage {shown_storage(storage)}: {first}") from None
    raise AssertionError("unreachable")


def open_study(name: str, storage: RDBStorage, multi_objective: bool, seed: int, target: int = 20,
               parallel: bool = False) -> tuple[optuna.Study, bool]:
    """The study, and whether this call created it (exactly one worker does: the storage's unique
    study name decides)."""
    directions = ["maximize", "minimize"] if multi_objective else ["maximize"]
    sampler = make_sampler(multi_objective, seed, target, parallel)
    try:
        study = optuna.create_study(study_name=name, storage=storage, directions=directions, sampler=sampler)
        created = True
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        created = False
    if [d.name for d in study.directions] != [d.upper() for d in directions]:
        raise UserError(f"study {name!r} was created {'multi' if len(study.directions) > 1 else 'single'}"
                        "-objective; use another --study name to change that")
    trials = len(study.trials)
    if trials or parallel:
        worker = zlib.crc32(WORKER.encode()) if parallel else 0
        study.sampler = make_sampler(multi_objective, (seed + trials + worker) % 2**32, target, parallel)
    return study, created


def check_study_program(study: optuna.Study, choice: ProgramChoice, storage: str) -> None:
    """A study records the compiled program its trials run (sha256); a resumed study must run the
    same one, or its trials would compare two programs as if they were one."""
    recorded = study.user_attrs.get(PROGRAM)
    if recorded is None:
        if not study.trials:
            study.set_user_attr(PROGRAM, choice.to_json())
        return
    if recorded.get("sha256") != choice.sha256:
        raise UserError(f"study {study.study_name!r} in {storage} runs program {recorded.get('path')} "
                        f"(sha256 {(recorded.get('sha256') or 'none')[:12]}), not {choice.to_json()['path']} "
                        f"(sha256 {(choice.sha256 or 'none')[:12]}); resume it with --program {recorded.get('path')}, "
                        "or use another --study")


# --- trials -------------------------------------------------------------------------------------


def next_step(study: optuna.Study, target: int) -> str:
    """"run" a trial, "wait" for other workers' running trials, or "done". Stale trials are failed
    (and queued again) first, so a dead worker's trial is not waited for."""
    fail_stale_trials(study)
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING))
    done = sum(t.state == TrialState.COMPLETE for t in trials)
    running = sum(t.state == TrialState.RUNNING for t in trials)
    waiting = sum(t.state == TrialState.WAITING for t in trials)
    if done >= target:
        return "done"
    if waiting or done + running < target:
        return "run"
    return "wait"


def queued(study: optuna.Study, trial: optuna.Trial) -> bool:
    """A trial that was queued (the baseline, or a retry) must run; a sampled one may be surplus."""
    frozen = study._storage.get_trial(trial._trial_id)
    return "fixed_params" in frozen.system_attrs or RetryHeartbeatStaleTrialCallback.retried_trial_number(frozen) is not None


def surplus(study: optuna.Study, trial: optuna.Trial, target: int) -> bool:
    """Another worker asked for the target's last trial first: as many trials before this one are
    complete or running as the study wants."""
    if queued(study, trial):
        return False
    ahead = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    return sum(t.number < trial.number for t in ahead) >= target


def retry_interrupted(study: optuna.Study, trial_id: int, retry: TrialRetry) -> bool:
    """Fail a trial this process was running when it was interrupted (Optuna fails it on Ctrl-C and
    leaves it RUNNING on other exits), and queue it again as a stale one would be."""
    trial = study._storage.get_trial(trial_id)
    if trial.state == TrialState.RUNNING:
        study._storage.set_trial_state_values(trial_id, TrialState.FAIL)
        trial = study._storage.get_trial(trial_id)
    if trial.state != TrialState.FAIL:
        return False
    retry.retry(study, trial)
    return True


def _pipeline_factories(program: ProgramChoice) -> FactoryFor:
    lms: tuple | None = None

    def make(trial_config: EvalConfig, trial_dir: Path) -> ProgramFactory:
        nonlocal lms
        factory = PipelineFactory(trial_config, trial_dir, program=program, lms=lms)
        lms = factory.assembly.lms  # tuned keys never touch the LM settings: one pair serves every trial
        return factory

    return make


def _trial_out(out: Path, config: EvalConfig) -> Path:
    return out / "trials" / config.fingerprint()


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
    """Work on the study until it has ``trials`` completed trials on the tuning split, then write its outputs.

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
    storage_url = options.storage or f"sqlite:///{(out / 'optuna.db').resolve()}"
    shown = shown_storage(storage_url)
    target = trials if trials is not None else options.trials
    tuning = with_dataset(config, options.dataset)
    multi = options.multi_objective
    # A sqlite study is one process's (its lock); a server study is shared by workers.
    parallel = sqlite_storage_file(storage_url) is None

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    choice = resolve_program(program, tuning.settings.lm)
    with study_lock(storage_url, name):
        factory_for = factory_for or _pipeline_factories(choice)
        storage, retry = open_storage(storage_url, options)
        study, created = open_study(name, storage, multi, options.seed, target, parallel)
        check_study_program(study, choice, shown)
        if created and options.start_from_config:
            # Trial 0 runs the configured settings: the baseline the tuned EX is compared with.
            study.enqueue_trial(params_from_settings(tuning.settings), user_attrs={"baseline": True})
        if not parallel:
            # Under the sqlite study's lock no other process runs a trial: a RUNNING one is a killed
            # process's, retried now rather than after the heartbeat's grace period.
            dead = [t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
            if sum(retry_interrupted(study, trial_id, retry) for trial_id in dead):
                log(f"queued again {len(dead)} trial(s) a killed process left running, with their parameters")
        remaining = max(0, target - len(completed(study)))
        log(f"study {name}: {len(completed(study))} completed, {remaining} to go ({shown})")

        tracker = StudyRun(config, config.mlflow_enabled and remaining > 0, f"tune:{name}",
                           {"study": name, "study_storage": storage_id(storage_url)}, close_stale=not parallel)

        def lost_worker(trial: optuna.trial.FrozenTrial) -> None:
            log(f"trial {trial.number} lost its worker (no heartbeat for {options.grace_s}s): retrying it with its parameters")
            tracker.kill_runs_of(trial.user_attrs)

        retry.on_stale = lost_worker
        if tracker.closed_stale:
            log(f"marked KILLED {tracker.closed_stale} MLflow run(s) of this study that a killed process left RUNNING")
        status = "FAILED"
        in_flight: list[int] = []  # the storage id of the trial this process runs
        try:
            if remaining:
                tracker.log_params({"study": name, "storage": shown, "target_trials": target, "seed": options.seed,
                                    "multi_objective": multi, "dataset": json.dumps(tuning.dataset.to_json()),
                                    "worker": WORKER,
                                    **program_params(choice.to_json())})
            done = completed(study)
            if done:  # the best so far of a resumed study, where its chart goes on
                tracker.log_step("best_ex", max(t.values[0] for t in done), max(t.number for t in done))

            def objective(trial: optuna.Trial):
                in_flight[:] = [trial._trial_id]
                if surplus(study, trial, target):
                    raise optuna.TrialPruned("the study has its trials: another worker took the last one")
                settings = settings_from_params(suggest_params(trial, options.retrieval_weights), tuning.settings)
                trial_config = replace(tuning, settings=settings, name=f"{name}-trial{trial.number}")
                trial_dir = _trial_out(out, trial_config)
                trial.set_user_attr("out", str(trial_dir))
                trial.set_user_attr("worker", WORKER)
                with tracker.trial(f"trial-{trial.number}",
                                   {"trial": trial.number, **{k: getattr(settings, k) for k in TUNED_KEYS}},
                                   trial.set_user_attr):
                    factory = factory_for(trial_config, trial_dir)
                    try:
                        summary = run_eval(trial_config, trial_dir, factory, progress=progress,
                                           tracker=tracker.live(trial_config))
                    finally:
                        close = getattr(factory, "close", None)
                        if close is not None:
                            close()
                    metrics = trial_metrics(summary)
                    for key, value in metrics.items():
                        trial.set_user_attr(key, value)
                    tracker.log_metrics(metrics)
                    tracker.log_step("trial_ex", metrics["ex"], trial.number)
                    best_before = max((t.values[0] for t in completed(study)), default=None)
                    if best_before is None or metrics["ex"] > best_before:
                        tracker.log_step("best_ex", metrics["ex"], trial.number)
                log(f"trial {trial.number}: EX {metrics['ex']:.2f}%, {metrics['lm_calls_per_question']:.2f} LM calls/question")
                if multi:
                    return metrics["ex"], metrics["lm_calls_per_question"]
                return metrics["ex"]

            waiting = False
            while (step := next_step(study, target)) != "done":
                if step == "wait":
                    if not waiting:
                        log("every trial the study still needs is running in another worker: waiting for them "
                            f"(a dead worker's trial is retried after {options.grace_s}s)")
                    waiting = True
                    time.sleep(options.heartbeat_s)
                    continue
                waiting = False
                study.optimize(objective, n_trials=1)
                in_flight.clear()
            done = completed(study)
            settings_path = config_path = None
            best: list[dict] = []
            if done:
                settings_path, config_path, best = write_best(study, config, out, multi)
            plots = save_plots(study, out, multi) if done else {}
            tracker.log_artifacts([settings_path, config_path, *(Path(p) for p in plots.values() if p and p.endswith(".png"))])
            status = "FINISHED"
        except BaseException as exc:
            status = status_of(exc)
            if status == "KILLED" and in_flight and retry_interrupted(study, in_flight[0], retry):
                log("the interrupted trial is queued again with its parameters: rerun to resume it")
            raise
        finally:
            tracker.end(status)
        return TuneResult(name, shown, out, len(done), best, settings_path, config_path, plots,
                          round(time.perf_counter() - started, 3))
