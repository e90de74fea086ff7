"""Experiment configs: which dataset, which pipeline mode, which settings, how to run and log.

    name: full                      # run name (default: the file's stem)
    extends: full.yaml              # optional: start from another config (path relative to this file)
    dataset:
      format: bird                  # bird | spider
      root: ../shared/benchmarks/bird   # relative paths resolve against the working directory
      split: dev                    # <root>/<split>.json
      sample: 40                    # optional seeded sample ...
      seed: 0
      limit: null                   # ... and/or the first N
      db_ids: null                  # or [student_club]
    mode: reflect                   # reflect | single-pass
    threads: 1
    score_timeout_s: 30             # per prediction+gold pair when scoring, as the official evaluator
    mlflow: {enabled: true, experiment: reflect-sql, autolog: false}   # autolog: mlflow.dspy traces
    kb: {enabled: true, cache: null}  # false: the whole schema is the context; cache default: settings.kb_dir
    settings: {...}                 # any key of reflect_sql.settings.Settings

``--set key=value`` overrides a setting (``theta_r=5``) or a config key (``mode=single-pass``,
``dataset.sample=40``, ``mlflow.enabled=false``). Settings precedence stays the project's:
defaults < YAML < environment ``REFLECT_SQL_<KEY>`` < ``--set``.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reflect_sql.errors import UserError
from reflect_sql.files import read_yaml_mapping
from reflect_sql.experiments.datasets import FORMATS, Question, load_dataset
from reflect_sql.settings import (RETRIEVAL_WEIGHT_KEYS, Settings, SettingsError, env_overrides, load_settings,
                                  parse_assignments)

MODES = ("reflect", "single-pass")
_TOP_KEYS = {"name", "extends", "dataset", "mode", "threads", "score_timeout_s", "mlflow", "kb", "settings", "description"}
_DATASET_KEYS = {"format", "root", "split", "sample", "seed", "limit", "db_ids"}
_MLFLOW_KEYS = {"enabled", "experiment", "autolog"}
_KB_KEYS = {"enabled", "cache"}
# Settings that change where things are kept or how calls are made, not what any question is asked
# or answered: a run recorded with a cassette may resume replaying it.
_NOT_IN_FINGERPRINT = {"lm_record_dir", "lm_replay_dir", "lm_cache", "cache_dir", "model_dir", "kb_dir", "mlflow_uri",
                       "lm_threads", "lm_timeout_s", "lm_retries", "sqlite_busy_timeout_s",
                       # Where and as whom to connect, not what is answered.
                       "pg_allow_superuser", "lm_api_base", "lm_api_key_env", "judge_lm_api_base",
                       "judge_lm_api_key_env"}
# Settings added after runs were first fingerprinted: left out while at their default, so that a run
# started before they existed still resumes, and in once changed, so that it then does not.
# (keep_referenced_tables is not among them: its default changed what retrieval returns, so a run
# started before it existed must not resume under it.)
_IN_FINGERPRINT_WHEN_CHANGED = {"max_value_bytes", "render_questions", "judge_form", "judge_pool", *RETRIEVAL_WEIGHT_KEYS}
_SECTIONS = {"dataset": _DATASET_KEYS, "mlflow": _MLFLOW_KEYS, "kb": _KB_KEYS}


@dataclass
class DatasetConfig:
    format: str
    root: Path
    split: str = "dev"
    sample: int | None = None
    seed: int = 0
    limit: int | None = None
    db_ids: list[str] | None = None

    def load(self) -> list[Question]:
        return load_dataset(self.format, self.root, self.split, limit=self.limit, sample=self.sample,
                            seed=self.seed, db_ids=self.db_ids)

    def to_json(self) -> dict[str, Any]:
        return {"format": self.format, "root": str(self.root), "split": self.split, "sample": self.sample,
                "seed": self.seed, "limit": self.limit, "db_ids": self.db_ids}


@dataclass
class EvalConfig:
    name: str
    dataset: DatasetConfig
    mode: str
    settings: Settings
    threads: int = 1
    score_timeout_s: float = 30.0
    mlflow_enabled: bool = True
    mlflow_experiment: str = "reflect-sql"
    mlflow_autolog: bool = False
    kb_enabled: bool = True
    kb_cache: Path = Path("kb_store")
    source: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """What decides each question's answer: a resumed run must match it (selection may differ)."""
        defaults = Settings.model_fields
        settings = {k: v for k, v in self.settings.model_dump(mode="json").items() if k not in _NOT_IN_FINGERPRINT
                    and not (k in _IN_FINGERPRINT_WHEN_CHANGED and v == defaults[k].default)}
        data = {"mode": self.mode, "kb": self.kb_enabled, "format": self.dataset.format, "root": str(self.dataset.root.resolve()),
                "split": self.dataset.split, "settings": settings}
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _read(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The config as a dict, with ``extends`` chains merged (a child's keys win, sections merge)."""
    path = path.resolve()
    if path in seen:
        raise UserError(f"config {path} extends itself (through {' -> '.join(p.name for p in seen)})")
    data = read_yaml_mapping(path, "config file")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise UserError(f"config {path}: unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_TOP_KEYS))})")
    for section in (*_SECTIONS, "settings"):
        if section in data and not isinstance(data[section] or {}, dict):
            raise UserError(f"config {path}: '{section}' must be a mapping")
    parent = data.pop("extends", None)
    if parent is None:
        return data
    base = _read(path.parent / parent, (*seen, path))
    base.pop("name", None)  # a variant is not named after the config it extends
    merged = {**base, **data}
    for section in (*_SECTIONS, "settings"):
        merged[section] = {**(base.get(section) or {}), **(data.get(section) or {})}
    return merged


def _apply_sets(data: dict[str, Any], pairs: list[str] | None) -> dict[str, Any]:
    """Split ``--set`` pairs into config keys (applied to ``data``) and settings overrides (returned)."""
    settings_overrides: dict[str, Any] = {}
    for key, value in parse_assignments(pairs).items():
        section, _, sub = key.partition(".")
        if sub:
            allowed = {**_SECTIONS, "settings": set(Settings.model_fields)}.get(section)
            if allowed is None or sub not in allowed:
                raise UserError(f"--set {key}: unknown key")
            if section == "settings":
                settings_overrides[sub] = value
            else:
                data.setdefault(section, {})[sub] = value
        elif key in Settings.model_fields:
            settings_overrides[key] = value
        elif key in _TOP_KEYS - {"extends", "settings", *_SECTIONS}:
            data[key] = value
        else:
            raise UserError(f"--set {key}: not a setting nor a config key")
    return settings_overrides


def _int_or_none(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"{what} must be an integer, got {value!r}")
    return value


def load_config(path: str | Path, sets: list[str] | None = None, *, limit: int | None = None) -> EvalConfig:
    path = Path(path)
    data = _read(path)
    settings_overrides = _apply_sets(data, sets)

    ds = dict(data.get("dataset") or {})
    unknown = set(ds) - _DATASET_KEYS
    if unknown:
        raise UserError(f"config {path}: unknown dataset key(s) {', '.join(sorted(unknown))}")
    fmt = ds.get("format")
    if fmt not in FORMATS:
        raise UserError(f"config {path}: dataset.format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if not ds.get("root"):
        raise UserError(f"config {path}: dataset.root is required")
    db_ids = ds.get("db_ids")
    if isinstance(db_ids, str):
        db_ids = [d.strip() for d in db_ids.split(",") if d.strip()]
    dataset = DatasetConfig(
        format=fmt, root=Path(str(ds["root"])).expanduser(), split=str(ds.get("split") or "dev"),
        sample=_int_or_none(ds.get("sample"), "dataset.sample"), seed=_int_or_none(ds.get("seed"), "dataset.seed") or 0,
        limit=_int_or_none(limit if limit is not None else ds.get("limit"), "dataset.limit"), db_ids=db_ids or None,
    )

    mode = data.get("mode", "reflect")
    if mode not in MODES:
        raise UserError(f"config {path}: mode must be one of {', '.join(MODES)}, got {mode!r}")
    threads = _int_or_none(data.get("threads", 1), "threads")
    if threads < 1:
        raise UserError(f"config {path}: threads must be at least 1")
    timeout = data.get("score_timeout_s", 30.0)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise UserError(f"config {path}: score_timeout_s must be a positive number")
    for section in ("mlflow", "kb"):
        unknown = set(data.get(section) or {}) - _SECTIONS[section]
        if unknown:
            raise UserError(f"config {path}: unknown {section} key(s) {', '.join(sorted(unknown))}")
    mlflow = data.get("mlflow") or {}
    kb = data.get("kb") or {}

    # YAML < environment < --set, as everywhere in the project.
    merged = {**(data.get("settings") or {}), **env_overrides(), **settings_overrides}
    try:
        settings = load_settings(None, merged, environ={})
    except SettingsError as exc:
        raise UserError(f"config {path}: {exc}") from None

    return EvalConfig(
        name=str(data.get("name") or path.stem), dataset=dataset, mode=mode, settings=settings, threads=threads,
        score_timeout_s=float(timeout), mlflow_enabled=bool(mlflow.get("enabled", True)),
        mlflow_experiment=str(mlflow.get("experiment") or "reflect-sql"),
        mlflow_autolog=bool(mlflow.get("autolog", False)),
        kb_enabled=bool(kb.get("enabled", True)), kb_cache=Path(str(kb.get("cache") or settings.kb_dir)),
        source=path, raw=data,
    )
