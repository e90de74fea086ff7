"""Every config shipped under experiments/configs loads, and the variants say what their comments say."""
from pathlib import Path

import pytest

from reflect_sql.experiments.config import load_config

CONFIGS = Path(__file__).resolve().parents[2] / "experiments" / "configs"
# Configs whose dataset lives outside ../shared (generated on demand) or that list variants.
def settings_differing(config: str, base: str) -> set[str]:
    """The settings in which eval config ``config`` differs from ``base``."""
    ours = load_config(CONFIGS / config).settings.model_dump()
    theirs = load_config(CONFIGS / base).settings.model_dump()
    return {k for k, v in ours.items() if theirs[k] != v}


NOT_EVAL = {"reflection.yaml", "ablation.yaml", "sampling_and_selection.yaml", "full_vs_single_pass.yaml", "restaurant_languages.yaml"}


@pytest.mark.parametrize("path", sorted(p.name for p in CONFIGS.glob("*.yaml") if p.name not in NOT_EVAL))
def test_each_eval_config_loads(path):
    config = load_config(CONFIGS / path)
    assert config.name == Path(path).stem


def test_the_checks_variant_is_full_repair_with_calibrated_thresholds():
    checks = load_config(CONFIGS / "full_repair_checks.yaml").settings
    scored = load_config(CONFIGS / "full_repair.yaml").settings
    assert checks.judge_form == "checks" and scored.judge_form == "scores"
    assert (checks.theta_s, checks.theta_e) == (8.334, 2.142)
    assert settings_differing("full_repair_checks.yaml", "full_repair.yaml") == {"judge_form", "theta_s", "theta_e"}


def test_the_judged_pool_shares_repair_votes_generations_and_differs_only_in_judging():
    pool = load_config(CONFIGS / "repair_judged_pool.yaml").settings
    assert settings_differing("repair_vote.yaml", "repair_only.yaml") == {
        "n_candidates", "resample_temperature", "selection"}
    differ = settings_differing("repair_judged_pool.yaml", "repair_vote.yaml")
    assert differ == {"use_entailment", "max_entailment_iterations", "judge_form", "theta_e", "selection", "judge_pool",
                      "vote_weight_semantic", "vote_weight_entailment"}
    assert pool.vote_weight_semantic == 0.0 and pool.judge_pool and not pool.use_semantic_reflection


@pytest.mark.parametrize("path", ["ablation.yaml", "reflection.yaml", "sampling_and_selection.yaml", "full_vs_single_pass.yaml"])
def test_each_ablation_set_loads_with_its_baseline_among_the_variants(path):
    from reflect_sql.experiments.ablation import load_ablation

    name, baseline, configs = load_ablation(CONFIGS / path, [], None)
    names = [c.name for c in configs]
    assert baseline in names and len(set(names)) == len(names) >= 2


def test_the_full_judged_pool_is_full_repair_checks_with_the_judged_pools_selection():
    full_pool = load_config(CONFIGS / "full_judged_pool.yaml").settings
    repair_pool = load_config(CONFIGS / "repair_judged_pool.yaml").settings
    differ = settings_differing("full_judged_pool.yaml", "full_repair_checks.yaml")
    assert differ == {"n_candidates", "resample_temperature", "selection", "judge_pool",
                      "vote_weight_semantic", "vote_weight_entailment"}
    for key in differ:
        assert getattr(full_pool, key) == getattr(repair_pool, key)
    assert full_pool.use_semantic_reflection and full_pool.max_entailment_iterations > 1
