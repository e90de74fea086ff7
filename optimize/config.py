"""Optimisation configs: an experiment config plus the knobs of ``tune`` and ``compile``.

``reflect-sql tune|compile CONFIG.yaml`` takes either an experiment config (``experiments/configs``;
then every option below has its default) or an optimisation config that points at one::

    experiment: full.yaml            # relative to this file; its dataset is the EVALUATION split
    tune:
      trials: 20                     # completed trials wanted in the study (a rerun tops it up)
      study: full-tune               # default: <experiment name>-tune
      seed: 0                        # sampler seed
      multi_objective: false         # true: maximise EX and minimise LM calls/question (NSGA-II)
      out: runs/tune/full-tune       # default: runs/tune/<study>
      storage: null                  # default: sqlite:///<out>/optuna.db
      dataset: {sample: 20, seed: 1} # the tuning split, merged over the experiment's dataset
      start_from_config: true        # trial 0 runs the experiment's own settings (the baseline)
      heartbeat_s: 60                # each worker's trial heartbeat (Optuna's, in the study storage)
      grace_s: 180                   # a trial silent this long lost its worker: it is retried
      trial_retries: 3               # at most this many retries of one trial
      retrieval_weights: false       # true: also search the 17 retrieval_* weights
    compile:
      optimizer: bootstrap           # labeled | bootstrap | random-search | mipro
      targets: [generator, semantic_judge, entailment_judge]
      train: {sample: 20, seed: 7, exclude_eval: true}
                                     # the train split, merged over the experiment's dataset;
                                     # exclude_eval drops the evaluated questions before sampling;
                                     # any question also evaluated is refused (see splits.py)
      max_bootstrapped_demos: 2
      max_labeled_demos: 2
      num_candidate_programs: 4      # random-search
      mipro_auto: light              # mipro: light | medium | heavy
      judge_val_fraction: 0.34       # labelled judge data held out to report agreement
      seed: 0

Paths inside the experiment config resolve as ``eval`` resolves them (against the working dir).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any


from reflect_sql.errors import UserError
from reflect_sql.files import read_yaml_mapping
from reflect_sql.experiments.config import EvalConfig, load_config

OPTIMIZERS = ("labeled", "bootstrap", "random-search", "mipro")
# The retrieval judge judges a context, not SQL: gold and perturbed queries give it no labels.
TARGETS = ("generator", "semantic_judge", "entailment_judge")
_TOP = {"experiment", "tune", "compile", "description"}
_TUNE = {"trials", "study", "seed", "multi_objective", "out", "storage", "dataset", "start_from_config",
         "heartbeat_s", "grace_s", "trial_retries", "retrieval_weights"}
_COMPILE = {"optimizer", "targets", "train", "max_bootstrapped_demos", "max_labeled_demos",
            "num_candidate_programs", "mipro_auto", "judge_val_fraction", "seed", "threads"}
_DATASET = {"format", "root", "split", "sample", "seed", "limit", "db_ids"}


@dataclass
class TuneOptions:
    trials: int = 20
    study: str | None = None
    seed: int = 0
    multi_objective: bool = False
    out: Path | None = None
    storage: str | None = None
    dataset: dict[str, Any] = field(default_factory=dict)
    start_from_config: bool = True
    # A worker records its trial's heartbeat every heartbeat_s; a RUNNING trial silent for
    # grace_s has lost its worker and is retried with its parameters, at most trial_retries times.
    heartbeat_s: int = 60
    grace_s: int = 180
    trial_retries: int = 3
    # Off by default: 17 more dimensions would change what an existing study searches.
    retrieval_weights: bool = False


@dataclass
class CompileOptions:
    optimizer: str = "bootstrap"
    targets: list[str] = field(default_factory=lambda: list(TARGETS))
    train: dict[str, Any] = field(default_factory=dict)
    max_bootstrapped_demos: int = 2
    max_labeled_demos: int = 2
    num_candidate_programs: int = 4
    mipro_auto: str = "light"
    judge_val_fraction: float = 0.34
    seed: int = 0
    threads: int = 1


@dataclass
class OptimizeConfig:
    experiment: EvalConfig
    tune: TuneOptions
    compile: CompileOptions
    source: Path


def _section(data: dict, name: str, allowed: set[str], path: Path) -> dict[str, Any]:
    section = data.get(name) or {}
    if not isinstance(section, dict):
        raise UserError(f"config {path}: '{name}' must be a mapping")
    unknown = set(section) - allowed
    if unknown:
        raise UserError(f"config {path}: unknown {name} key(s) {', '.join(sorted(unknown))} "
                        f"(known: {', '.join(sorted(allowed))})")
    for sub in ("dataset", "train"):
        if sub in section:
            if not isinstance(section[sub] or {}, dict):
                raise UserError(f"config {path}: '{name}.{sub}' must be a mapping")
            bad = set(section[sub] or {}) - _DATASET - ({"exclude_eval"} if sub == "train" else set())
            if bad:
                raise UserError(f"config {path}: unknown {name}.{sub} key(s) {', '.join(sorted(bad))}")
    return dict(section)


def _positive_int(value: Any, what: str, path: Path, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UserError(f"config {path}: {what} must be an integer >= {minimum}, got {value!r}")
    return value


def load_optimize_config(path: str | Path, sets: list[str] | None = None) -> OptimizeConfig:
    path = Path(path)
    data = read_yaml_mapping(path, "config file")

    if "experiment" not in data:  # a plain experiment config: default options
        return OptimizeConfig(load_config(path, sets), TuneOptions(), CompileOptions(), path)

    unknown = set(data) - _TOP
    if unknown:
        raise UserError(f"config {path}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_TOP))})")
    experiment = load_config(path.parent / str(data["experiment"]), sets)

    t = _section(data, "tune", _TUNE, path)
    tune = TuneOptions(
        trials=_positive_int(t.get("trials", 20), "tune.trials", path),
        study=str(t["study"]) if t.get("study") else None,
        seed=_positive_int(t.get("seed", 0), "tune.seed", path, 0),
        multi_objective=bool(t.get("multi_objective", False)),
        out=Path(str(t["out"])) if t.get("out") else None,
        storage=str(t["storage"]) if t.get("storage") else None,
        dataset=dict(t.get("dataset") or {}),
        start_from_config=bool(t.get("start_from_config", True)),
        heartbeat_s=_positive_int(t.get("heartbeat_s", 60), "tune.heartbeat_s", path),
        grace_s=_positive_int(t.get("grace_s", 180), "tune.grace_s", path),
        trial_retries=_positive_int(t.get("trial_retries", 3), "tune.trial_retries", path, 0),
        retrieval_weights=bool(t.get("retrieval_weights", False)),
    )
    if tune.grace_s <= tune.heartbeat_s:
        raise UserError(f"config {path}: tune.grace_s ({tune.grace_s}) must exceed tune.heartbeat_s ({tune.heartbeat_s})")

    c = _section(data, "compile", _COMPILE, path)
    optimizer = c.get("optimizer", "bootstrap")
    if optimizer not in OPTIMIZERS:
        raise UserError(f"config {path}: compile.optimizer must be one of {', '.join(OPTIMIZERS)}, got {optimizer!r}")
    targets = c.get("targets", list(TARGETS))
    if isinstance(targets, str):
        targets = [x.strip() for x in targets.split(",") if x.strip()]
    bad = [x for x in targets or [] if x not in TARGETS]
    if bad or not targets:
        raise UserError(f"config {path}: compile.targets must be a non-empty subset of {', '.join(TARGETS)}")
    fraction = c.get("judge_val_fraction", 0.34)
    if not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise UserError(f"config {path}: compile.judge_val_fraction must lie in [0, 1)")
    auto = c.get("mipro_auto", "light")
    if auto not in ("light", "medium", "heavy"):
        raise UserError(f"config {path}: compile.mipro_auto must be light, medium or heavy")
    compile_options = CompileOptions(
        optimizer=optimizer, targets=list(targets), train=dict(c.get("train") or {}),
        max_bootstrapped_demos=_positive_int(c.get("max_bootstrapped_demos", 2), "compile.max_bootstrapped_demos", path, 0),
        max_labeled_demos=_positive_int(c.get("max_labeled_demos", 2), "compile.max_labeled_demos", path, 0),
        num_candidate_programs=_positive_int(c.get("num_candidate_programs", 4), "compile.num_candidate_programs", path),
        mipro_auto=auto, judge_val_fraction=float(fraction),
        seed=_positive_int(c.get("seed", 0), "compile.seed", path, 0),
        threads=_positive_int(c.get("threads", 1), "compile.threads", path),
    )
    return OptimizeConfig(experiment, tune, compile_options, path)


def with_dataset(config: EvalConfig, overrides: dict[str, Any], name_suffix: str = "") -> EvalConfig:
    """``config`` on another selection of questions (``overrides`` over its dataset section)."""
    if not overrides and not name_suffix:
        return config
    dataset = config.dataset
    changes = dict(overrides)
    if "root" in changes:
        changes["root"] = Path(str(changes["root"])).expanduser()
    if isinstance(changes.get("db_ids"), str):
        changes["db_ids"] = [d.strip() for d in changes["db_ids"].split(",") if d.strip()] or None
    return replace(config, dataset=replace(dataset, **changes), name=config.name + name_suffix)
