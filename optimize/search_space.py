"""The search space of the tuning study: the paper's thresholds, mixing coefficients and semantic
weights (section 7 grid-searched them), as Optuna parameters.

The four semantic weights must lie on the simplex (``Settings`` checks that they sum to 1). They
come from three independent "stick-breaking" parameters in [0, 1]: each breaks off a share of
what is left of the stick. Mapping each break through the inverse CDF of Beta(1, K - i) makes a
uniformly drawn parameter vector land uniformly on the simplex (a flat Dirichlet), so random and
TPE sampling start from no bias towards any weight, and no parameter is redundant, unlike
normalising four free numbers.

The retrieval weights (``retrieval_*`` settings, kb/retrieve.py) are searched when asked for
(``retrieval_weights=True``): seventeen more dimensions are worth their trials only on a study
that tunes retrieval itself.

``settings_from_params`` is a pure function of ``trial.params``, so a finished (frozen) trial
gives back exactly the settings its objective ran with.
"""
from __future__ import annotations

from typing import Any, Mapping

from reflect_sql.settings import SEMANTIC_WEIGHT_KEYS, Settings
from reflect_sql.signatures.scales import ENTAILMENT_SCALE, RETRIEVAL_SCALE, SEMANTIC_SCALE, Scale


def _bounds(scale: Scale) -> tuple[float, float]:
    return float(scale.low), float(scale.high)


# name -> (low, high, step). Steps keep the YAML readable and let TPE revisit equal settings, whose
# LM calls the DSPy cache then serves; they are finer than the judges' integer scores can resolve.
THRESHOLDS: dict[str, tuple[float, float, float]] = {
    "theta_r": (*_bounds(RETRIEVAL_SCALE), 0.25),
    "theta_s": (*_bounds(SEMANTIC_SCALE), 0.25),
    "theta_e": (*_bounds(ENTAILMENT_SCALE), 0.125),
    "alpha": (0.0, 1.0, 0.05),
    "beta": (0.0, 1.0, 0.05),
}
STICK_PARAMS = tuple(f"stick_{i}" for i in range(1, len(SEMANTIC_WEIGHT_KEYS)))
WEIGHT_DECIMALS = 4

TUNED_KEYS = (*THRESHOLDS, *SEMANTIC_WEIGHT_KEYS)

# The retrieval weights' ranges; each default lies on its grid. A step of 1 is a whole number.
RETRIEVAL_WEIGHTS: dict[str, tuple[float, float, float]] = {
    "retrieval_table_name": (0.0, 1.0, 0.05),
    "retrieval_table_column": (0.0, 1.0, 0.05),
    "retrieval_table_value": (0.0, 1.0, 0.05),
    "retrieval_column_name": (0.0, 1.0, 0.05),
    "retrieval_column_value": (0.0, 1.0, 0.05),
    "retrieval_label": (0.0, 1.0, 0.05),
    "retrieval_example": (0.0, 1.0, 0.05),
    "retrieval_example_min_similarity": (0.0, 1.0, 0.05),
    "retrieval_table_margin": (0.0, 1.0, 0.05),
    "retrieval_column_floor": (0.0, 1.5, 0.05),
    "retrieval_strong_table_name": (0.0, 1.0, 0.05),
    "retrieval_strong_column_name": (0.0, 1.5, 0.05),
    "retrieval_strong_value": (0.0, 1.5, 0.05),
    "retrieval_margin_per_step": (0.0, 1.0, 0.05),
    "retrieval_floor_per_step": (0.0, 0.5, 0.05),
    "retrieval_examples_shown": (0, 6, 1),
    "retrieval_example_show_similarity": (0.0, 1.0, 0.05),
}


def _on_grid(value: float, low: float, high: float, step: float) -> float:
    value = min(max(value, low), high)
    return round(low + round((value - low) / step) * step, 6)


def _suggest(trial, name: str, low: float, high: float, step: float) -> float:
    if isinstance(step, int):
        return trial.suggest_int(name, low, high, step=step)
    return trial.suggest_float(name, low, high, step=step)


def simplex_weights(sticks: list[float]) -> dict[str, float]:
    """K-1 numbers in [0, 1] -> K weights >= 0 summing to exactly 1 (after rounding)."""
    k = len(SEMANTIC_WEIGHT_KEYS)
    if len(sticks) != k - 1:
        raise ValueError(f"expected {k - 1} stick parameters, got {len(sticks)}")
    remaining = 1.0
    raw = []
    for i, u in enumerate(sticks):
        if not 0.0 <= u <= 1.0:
            raise ValueError(f"stick parameter {i + 1} must lie in [0, 1], got {u}")
        share = 1.0 - (1.0 - u) ** (1.0 / (k - 1 - i))  # inverse CDF of Beta(1, k-1-i)
        raw.append(remaining * share)
        remaining -= raw[-1]
    raw.append(remaining)
    rounded = [round(max(w, 0.0), WEIGHT_DECIMALS) for w in raw]
    # Rounding can leave the sum off by a few 1e-4; the largest weight absorbs it, so it stays >= 0.
    largest = max(range(k), key=lambda i: rounded[i])
    rounded[largest] = round(1.0 - sum(w for i, w in enumerate(rounded) if i != largest), WEIGHT_DECIMALS)
    return dict(zip(SEMANTIC_WEIGHT_KEYS, rounded))


def params_from_settings(settings: Settings, retrieval_weights: bool = False) -> dict[str, float]:
    """The parameters that give back ``settings``' tuned keys (to start a study from the config)."""
    params: dict[str, float] = {name: _on_grid(getattr(settings, name), *space) for name, space in THRESHOLDS.items()}
    if retrieval_weights:
        for name, (low, high, step) in RETRIEVAL_WEIGHTS.items():
            value = _on_grid(getattr(settings, name), low, high, step)
            params[name] = int(value) if isinstance(step, int) else value
    k = len(SEMANTIC_WEIGHT_KEYS)
    remaining = 1.0
    for i, key in enumerate(SEMANTIC_WEIGHT_KEYS[:-1]):
        share = getattr(settings, key) / remaining if remaining > 1e-12 else 0.0
        share = min(max(share, 0.0), 1.0)
        params[STICK_PARAMS[i]] = 1.0 - (1.0 - share) ** (k - 1 - i)  # the Beta(1, k-1-i) CDF
        remaining -= getattr(settings, key)
    return params


def suggest_params(trial, retrieval_weights: bool = False) -> dict[str, float]:
    """Ask the trial for every tuned parameter; returns ``trial.params``-shaped values."""
    params = {name: trial.suggest_float(name, low, high, step=step) for name, (low, high, step) in THRESHOLDS.items()}
    params.update({name: trial.suggest_float(name, 0.0, 1.0) for name in STICK_PARAMS})
    if retrieval_weights:
        params.update({name: _suggest(trial, name, *space) for name, space in RETRIEVAL_WEIGHTS.items()})
    return params


def settings_from_params(params: Mapping[str, Any], base: Settings) -> Settings:
    missing = [name for name in (*THRESHOLDS, *STICK_PARAMS) if name not in params]
    if missing:
        raise ValueError(f"trial parameters lack {', '.join(missing)}")
    update: dict[str, Any] = {name: round(float(params[name]), 6) for name in THRESHOLDS}
    update.update(simplex_weights([float(params[name]) for name in STICK_PARAMS]))
    update.update({name: params[name] if isinstance(step, int) else round(float(params[name]), 6)
                   for name, (_, _, step) in RETRIEVAL_WEIGHTS.items() if name in params})
    # Through the constructor, not model_copy, so the scale and simplex checks run.
    return Settings(**{**base.model_dump(), **update})


def trial_settings(trial, base: Settings, retrieval_weights: bool = False) -> Settings:
    return settings_from_params(suggest_params(trial, retrieval_weights), base)
