"""Ablation sets (table, charts, nested MLflow runs), calibration math and the calibrate command."""
from __future__ import annotations

import json

import dspy
import pytest

from reflect_sql.cli import main
from reflect_sql.errors import UserError
from reflect_sql.experiments.ablation import load_ablation, run_ablation
from reflect_sql.experiments.calibration import at_threshold, auc, calibrate

GOOD = {"names of fruit": "SELECT name FROM item WHERE kind = 'fruit'", "kinds": "SELECT DISTINCT kind FROM item",
        "cheapest first": "SELECT name FROM item ORDER BY price"}


def variant_factory(config, run_dir):
    """Full system answers everything; without entailment it gets one question wrong."""
    def program(question, evidence=""):
        sql = GOOD[question]
        if not config.settings.use_entailment and question == "kinds":
            sql = "SELECT name FROM item"
        right = sql == GOOD[question]
        return dspy.Prediction(sql=sql, rows=[], scores={"retrieval": 8.0, "semantic": 9.0 if right else 4.0,
                                                         "entailment": 5.0 if right else 2.0},
                               cost={"lm_calls": 5 if config.settings.use_entailment else 3})
    return lambda q: program


@pytest.fixture()
def ablation_set(tiny_bird, tmp_path):
    (tmp_path / "full.yaml").write_text(
        f"name: full\ndataset: {{format: bird, root: {tiny_bird}}}\nmlflow: {{enabled: true, experiment: abl-test}}\n"
        f"settings: {{mlflow_uri: 'sqlite:///{tmp_path}/mlruns.db'}}\n")
    (tmp_path / "no_entailment.yaml").write_text("extends: full.yaml\nname: no_entailment\nsettings: {use_entailment: false}\n")
    (tmp_path / "set.yaml").write_text("name: tiny-ablation\nbaseline: full\nvariants: [full.yaml, no_entailment.yaml]\n")
    return tmp_path / "set.yaml"


@pytest.mark.slow
def test_ablation_table_charts_and_nested_mlflow_runs(ablation_set, tmp_path):
    out = tmp_path / "abl"
    result = run_ablation(ablation_set, out, progress=False, factory_for=variant_factory)
    table = (out / "ablation.md").read_text()
    assert ("| Variant | Simple | Moderate | Challenging | Overall | Δ vs full | LM calls/q | prompt tok/q | "
            "completion tok/q | s/q |") in table
    assert "| full | 100.00 | 100.00 | 100.00 | 100.00 | - | 5.0 |" in table
    assert "| no_entailment | 100.00 | 0.00 | 100.00 | 66.67 | -33.33 | 3.0 |" in table
    for chart in ("ablation.png", "accuracy_vs_cost.png"):
        assert (out / "charts" / chart).read_bytes()[:4] == b"\x89PNG"
    assert result["variants"]["no_entailment"]["overall"] == 66.67

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns.db")
    runs = mlflow.search_runs(experiment_names=["abl-test"], output_format="list")
    parent = [r for r in runs if r.data.tags.get("kind") == "ablation"]
    children = [r for r in runs if r.data.tags.get("kind") == "evaluation"]
    assert len(parent) == 1 and len(children) == 2
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parent[0].info.run_id}
    child = next(r for r in children if r.info.run_name == "no_entailment")
    assert child.data.metrics["ex_overall"] == 66.67 and child.data.metrics["lm_calls_per_question"] == 3.0
    assert child.data.params["settings.use_entailment"] == "False" and child.data.params["git_commit"]
    artifacts = {f.path for f in mlflow.MlflowClient().list_artifacts(child.info.run_id)}
    assert {"summary.json", "results.jsonl", "per_question.csv", "predictions", "charts", "config"} <= artifacts
    assert (tmp_path / "mlartifacts").is_dir()  # beside the sqlite store, not in the working directory


@pytest.mark.slow
def test_ablation_in_steps_runs_every_variant_on_the_same_questions_first(ablation_set, tmp_path):
    order = []

    def recording_factory(config, run_dir):
        answer = variant_factory(config, run_dir)

        def program(question, evidence=""):
            order.append((config.name, question))
            return answer(None)(question, evidence)
        return lambda q: program

    out = tmp_path / "abl"
    stepped = run_ablation(ablation_set, out, progress=False, factory_for=recording_factory, step=2)
    # Two questions in both variants before the third question in either.
    assert [name for name, _ in order] == ["full", "full", "no_entailment", "no_entailment", "full", "no_entailment"]
    assert [q for name, q in order if name == "full"] == [q for name, q in order if name == "no_entailment"]
    assert stepped["variants"]["no_entailment"]["overall"] == 66.67
    assert "| no_entailment | 100.00 | 0.00 | 100.00 | 66.67 | -33.33 | 3.0 |" in (out / "ablation.md").read_text()

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlruns.db")
    runs = mlflow.search_runs(experiment_names=["abl-test"], output_format="list")
    # Each round resumes the variant's own run: one MLflow run per variant, not per round.
    assert sorted(r.info.run_name for r in runs if r.data.tags.get("kind") == "evaluation") == ["full", "no_entailment"]
    with pytest.raises(UserError, match="--step"):
        run_ablation(ablation_set, out, progress=False, factory_for=recording_factory, step=0)


def test_ablation_refuses_variants_on_different_questions(ablation_set, tmp_path):
    (tmp_path / "no_entailment.yaml").write_text("extends: full.yaml\nname: no_entailment\ndataset: {limit: 1}\n")
    with pytest.raises(UserError, match="different questions"):
        load_ablation(ablation_set)


def test_auc_matches_sklearn_and_handles_ties():
    from sklearn.metrics import roc_auc_score

    scores = [9, 8, 8, 3, 5, 7, 2, 8, 6, 1]
    labels = [True, True, False, False, True, False, False, True, True, False]
    assert auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores))
    assert auc([1, 2], [True, True]) is None
    # >= 6: 9T 8T 8F 7F 8T 6T -> 4 of 6 accepted are right; 4 of the 5 right answers pass.
    assert at_threshold(scores, labels, 6) == {"accepted": 6, "precision": 4 / 6, "recall": 0.8}


def test_calibrate_rows_and_command(tiny_bird, tmp_path, capsys):
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.runner import run_eval

    (tmp_path / "c.yaml").write_text(f"dataset: {{format: bird, root: {tiny_bird}}}\nsettings: {{use_entailment: false}}\n")
    config = load_config(tmp_path / "c.yaml")
    run_eval(config, tmp_path / "run", variant_factory(config, None), progress=False)
    rows = {r["judge"]: r for r in calibrate([json.loads(l) for l in (tmp_path / "run" / "results.jsonl").read_text().splitlines()],
                                             {"theta_r": 4.0, "theta_s": 5.0, "theta_e": 3.0})}
    assert rows["semantic"]["auc"] == 1.0 and rows["semantic"]["precision"] == 1.0 and rows["semantic"]["accepted"] == 2
    assert rows["retrieval"]["auc"] == 0.5  # a constant score tells nothing
    assert main(["calibrate", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "| S (semantic) | 5.0 | 3 | 2 | 1.000 | 2 | 1.000 | 1.000 |" in out
    assert (tmp_path / "run" / "charts" / "calibration.png").is_file()
    assert main(["calibrate", str(tmp_path)]) == 2


def test_eval_command_bad_config_exits_2(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("dataset: {format: parquet, root: x}\n")
    assert main(["eval", str(tmp_path / "bad.yaml"), "--no-progress"]) == 2
    assert "dataset.format must be one of" in capsys.readouterr().err
