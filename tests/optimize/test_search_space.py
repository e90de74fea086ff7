import itertools
import math
import random

import optuna
import pytest

from reflect_sql.optimize.search_space import (
    STICK_PARAMS,
    THRESHOLDS,
    settings_from_params,
    simplex_weights,
    trial_settings,
)
from reflect_sql.settings import SEMANTIC_WEIGHT_KEYS, Settings, load_settings

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _on_simplex(weights: dict) -> None:
    values = [weights[k] for k in SEMANTIC_WEIGHT_KEYS]
    assert all(v >= 0 for v in values), weights
    assert math.isclose(sum(values), 1.0, abs_tol=1e-9), weights


def test_weights_on_simplex_for_random_and_extreme_sticks():
    rng = random.Random(7)
    samples = [[rng.random() for _ in STICK_PARAMS] for _ in range(5000)]
    samples += [list(c) for c in itertools.product([0.0, 1e-12, 0.5, 1 - 1e-12, 1.0], repeat=len(STICK_PARAMS))]
    for sticks in samples:
        w = simplex_weights(sticks)
        _on_simplex(w)
        Settings(**w)  # the settings' own simplex check accepts every one


def test_uniform_sticks_spread_uniformly_over_the_simplex():
    # A flat Dirichlet over 4 weights has mean 1/4 for each and P(w_i > 1/2) = (1/2)^3.
    rng = random.Random(0)
    draws = [simplex_weights([rng.random() for _ in STICK_PARAMS]) for _ in range(20000)]
    for key in SEMANTIC_WEIGHT_KEYS:
        values = [d[key] for d in draws]
        assert abs(sum(values) / len(values) - 0.25) < 0.01, key
        assert abs(sum(v > 0.5 for v in values) / len(values) - 0.125) < 0.01, key


def test_bad_sticks_are_refused():
    with pytest.raises(ValueError):
        simplex_weights([0.1, 0.2])
    with pytest.raises(ValueError):
        simplex_weights([0.1, 1.2, 0.3])


@pytest.mark.parametrize("sampler", [optuna.samplers.TPESampler(seed=1, n_startup_trials=10), optuna.samplers.RandomSampler(seed=2)])
def test_every_trial_gives_valid_settings_in_range(sampler):
    base = Settings(theta_r=7.0, k_tables=6)
    study = optuna.create_study(sampler=sampler, direction="maximize")
    seen = []

    def objective(trial):
        s = trial_settings(trial, base)
        seen.append(s)
        # Pull towards a corner so TPE explores edges of the simplex too.
        return s.w_j - s.theta_s / 10

    study.optimize(objective, n_trials=60)
    assert len(seen) == 60
    for s, trial in zip(seen, study.trials):
        _on_simplex(s.model_dump())
        for name, (lo, hi, _) in THRESHOLDS.items():
            assert lo <= getattr(s, name) <= hi
        assert s.k_tables == 6  # untouched settings come from the base
        # The frozen trial's params give back exactly the settings the objective ran with.
        assert settings_from_params(trial.params, base) == s


def test_settings_from_params_round_trip_through_yaml(tmp_path):
    params = {"theta_r": 3.25, "theta_s": 6.5, "theta_e": 2.375, "alpha": 0.35, "beta": 0.9,
              "stick_1": 0.123, "stick_2": 0.987, "stick_3": 0.5}
    s = settings_from_params(params, Settings())
    path = tmp_path / "best.yaml"
    path.write_text(s.to_yaml())
    assert load_settings(path) == s


@pytest.mark.parametrize("base", [Settings(), Settings(theta_r=7.3, theta_e=4.9, alpha=0.123, w_c=0.0, w_g=0.5, w_j=0.0, w_q=0.5),
                                  Settings(w_c=0.25, w_g=0.25, w_j=0.25, w_q=0.25, theta_s=1.0)])
def test_params_from_settings_invert_the_mapping(base):
    from reflect_sql.optimize.search_space import params_from_settings

    back = settings_from_params(params_from_settings(base), base)
    for key in SEMANTIC_WEIGHT_KEYS:
        assert getattr(back, key) == pytest.approx(getattr(base, key), abs=1e-4)
    for name, (lo, hi, step) in THRESHOLDS.items():
        assert abs(getattr(back, name) - getattr(base, name)) <= step / 2 + 1e-9  # nearest grid point
    if base == Settings():  # the paper's defaults lie on the grid: the baseline trial is exact
        assert back == base


def test_the_retrieval_weights_are_searched_when_asked_and_give_back_their_settings():
    from reflect_sql.optimize.search_space import RETRIEVAL_WEIGHTS, params_from_settings
    from reflect_sql.settings import RETRIEVAL_WEIGHT_KEYS

    assert set(RETRIEVAL_WEIGHTS) == set(RETRIEVAL_WEIGHT_KEYS)  # every retrieval setting has a range
    base = Settings(k_tables=6)
    assert settings_from_params(params_from_settings(base, retrieval_weights=True), base) == base  # defaults on grid
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3), direction="maximize")
    seen = []

    def objective(trial):
        seen.append(trial_settings(trial, base, retrieval_weights=True))
        return seen[-1].retrieval_table_margin

    study.optimize(objective, n_trials=20)
    assert set(RETRIEVAL_WEIGHTS) <= set(study.trials[0].params)
    for s, trial in zip(seen, study.trials):
        for name, (lo, hi, _) in RETRIEVAL_WEIGHTS.items():
            assert lo <= getattr(s, name) <= hi
        assert settings_from_params(trial.params, base) == s
    assert len({s.retrieval_column_floor for s in seen}) > 1  # the trials tried other weights
    # Not asked: a study's parameters stay the thresholds and the sticks.
    plain = optuna.create_study()
    plain.optimize(lambda trial: trial_settings(trial, base).theta_r, n_trials=1)
    assert not set(RETRIEVAL_WEIGHTS) & set(plain.trials[0].params)
