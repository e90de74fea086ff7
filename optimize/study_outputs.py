"""What a study leaves behind: the best trial as a settings file and an experiment config, the
Pareto front of a multi-objective study, and Optuna's charts.

Every worker of a distributed study writes them when it stops, from the whole study: the last
one to stop writes the final ones. Files are written whole (``atomic_file``), so a worker
finishing at the same moment as another never leaves half a file.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable

import matplotlib
import optuna
import yaml
from optuna.visualization import matplotlib as optuna_charts

from reflect_sql.experiments.config import EvalConfig
from reflect_sql.files import atomic_file
from reflect_sql.optimize.search_space import TUNED_KEYS, settings_from_params
from reflect_sql.settings import Settings

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

PROGRAM = "program"  # the study's user attribute naming the compiled program its trials run


def completed(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def _write(path: Path, text: str) -> None:
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


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
        done = completed(study)
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
    _write(settings_path, header + settings.to_yaml())

    best_config = {"name": f"{config.name}-tuned"}
    if config.source is not None:
        best_config["extends"] = os.path.relpath(Path(config.source).resolve(), out.resolve())
    else:  # no file to extend: carry the experiment's own sections
        best_config.update({k: v for k, v in config.raw.items() if k not in ("name", "settings")})
    # Every setting, not only the tuned ones: --set overrides given to tune are part of what was measured.
    best_config["settings"] = settings.model_dump(mode="json")
    program = study.user_attrs.get(PROGRAM) or {}
    if program.get("path"):
        header += (f"# Trials ran program {program['path']} (sha256 {program.get('sha256') or 'none'}): "
                   f"evaluate with --program {program['path']}.\n")
    config_path = out / "best_config.yaml"
    _write(config_path,
           header + "# The dataset comes from the extended config: evaluate on questions the study did not tune on.\n"
           + yaml.safe_dump(best_config, sort_keys=False, allow_unicode=True))

    described = [_describe(t, config.settings) for t in front]
    if multi_objective:
        _write(out / "pareto.json", json.dumps(described, indent=2) + "\n")
    return settings_path, config_path, described


def save_plots(study: optuna.Study, out: Path, multi_objective: bool) -> dict[str, str | None]:
    """PNG charts; a chart that cannot be drawn yet (too few trials) is skipped with the reason."""
    ex = (lambda t: t.values[0]) if multi_objective else None
    charts: dict[str, Callable[[], Any]] = {
        "optimization_history": lambda: optuna_charts.plot_optimization_history(study, target=ex, target_name="EX (%)"),
        "param_importances": lambda: optuna_charts.plot_param_importances(study, target=ex, target_name="EX (%)"),
    }
    if multi_objective:
        charts["pareto_front"] = lambda: optuna_charts.plot_pareto_front(study, target_names=["EX (%)", "LM calls / question"])
    done = completed(study)
    plots: dict[str, str | None] = {}
    for name, draw in charts.items():
        if name == "param_importances" and len({t.values[0] for t in done}) < 2:
            plots[name] = f"skipped: needs at least 2 completed trials with different EX (have {len(done)} completed)"
            continue
        path = out / f"{name}.png"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # optuna marks its matplotlib backend experimental
                axes = draw()
            figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
            figure.tight_layout()
            with atomic_file(path) as tmp:
                figure.savefig(tmp, dpi=110, format="png")
            plt.close(figure)
            plots[name] = str(path)
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            plots[name] = f"skipped: {exc}"
    return plots
