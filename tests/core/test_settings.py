import pytest

from reflect_sql.settings import Settings, SettingsError, load_settings, parse_assignments


def test_defaults_are_the_papers_table_2():
    s = Settings()
    assert (s.theta_r, s.theta_s, s.theta_e) == (4.0, 5.0, 3.0)
    assert (s.alpha, s.beta) == (0.6, 0.2)
    assert (s.w_c, s.w_g, s.w_j, s.w_q) == (0.1, 0.3, 0.4, 0.2)
    assert s.effective_judge_lm == s.lm


def test_precedence_defaults_yaml_env_flags(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("theta_r: 6\nalpha: 0.5\nbeta: 0.3\nlm: openai/gpt-4o-mini\n")
    env = {"REFLECT_SQL_ALPHA": "0.7", "REFLECT_SQL_BETA": "0.4", "UNRELATED": "x"}
    s = load_settings(cfg, overrides={"beta": 0.9}, environ=env)
    assert s.theta_r == 6  # YAML beats the default
    assert s.alpha == 0.7  # env beats YAML
    assert s.beta == 0.9  # flags beat env
    assert s.lm == "openai/gpt-4o-mini"
    assert s.theta_s == 5.0  # untouched default


def test_settings_section_of_an_experiment_config(tmp_path):
    cfg = tmp_path / "exp.yaml"
    cfg.write_text("dataset: {name: bird}\nsettings:\n  theta_e: 4\n")
    assert load_settings(cfg, environ={}).theta_e == 4


@pytest.mark.parametrize(
    "overrides, needle",
    [
        ({"w_c": 0.5}, "sum to 1"),
        ({"w_c": -0.1, "w_g": 0.5}, "w_c"),
        ({"theta_r": 11}, "theta_r=11"),
        ({"theta_e": 6}, "[1, 5]"),
        ({"theta_s": 0}, "theta_s"),
        ({"alpha": 1.5}, "alpha"),
        ({"retrieval_table_margin": -0.1}, "retrieval_table_margin"),
        ({"retrieval_example_min_similarity": 1.5}, "retrieval_example_min_similarity"),
        ({"retrieval_examples_shown": 2.5}, "retrieval_examples_shown"),
        ({"k_tables": 0}, "k_tables"),
        ({"no_such_knob": 1}, "no_such_knob"),
    ],
)
def test_validation_names_the_problem(overrides, needle):
    with pytest.raises(SettingsError) as err:
        load_settings(overrides=overrides, environ={})
    assert needle in str(err.value)


def test_error_says_where_a_bad_value_came_from(tmp_path):
    with pytest.raises(SettingsError, match="environment REFLECT_SQL_ALPHA"):
        load_settings(environ={"REFLECT_SQL_ALPHA": "lots"})
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("theta_q: 3\n")
    with pytest.raises(SettingsError, match="theta_q.*unknown setting"):
        load_settings(cfg, environ={})


@pytest.mark.parametrize("text", ["[1, 2]", "a: [unclosed", "\xff\xfe"])
def test_malformed_yaml_is_a_clear_error(tmp_path, text):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text.encode("latin-1"))
    with pytest.raises(SettingsError, match="c.yaml"):
        load_settings(cfg, environ={})


def test_missing_config_file():
    with pytest.raises(SettingsError, match="not found"):
        load_settings("/nonexistent/x.yaml", environ={})


def test_set_assignments_parse_scalars():
    assert parse_assignments(["theta_r=5", "use_entailment=false", "lm=openai/gpt-4o"]) == {
        "theta_r": 5,
        "use_entailment": False,
        "lm": "openai/gpt-4o",
    }
    with pytest.raises(SettingsError):
        parse_assignments(["theta_r"])


def test_yaml_round_trip(tmp_path):
    s = load_settings(overrides={"theta_r": 7, "w_c": 0.25, "w_g": 0.25, "w_j": 0.25, "w_q": 0.25}, environ={})
    cfg = tmp_path / "best.yaml"
    cfg.write_text(s.to_yaml())
    assert load_settings(cfg, environ={}) == s
