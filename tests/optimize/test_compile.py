import json
import re

import pytest

from reflect_sql.cli import main
from reflect_sql.errors import UserError
from reflect_sql.optimize.config import load_optimize_config
from reflect_sql.optimize.export import describe, render
from reflect_sql.optimize.program_io import load_into, load_program, predictor_names


@pytest.fixture()
def opt_config(tmp_path, tiny_dataset, write_config):
    """Evaluate on the first 3 questions; train on the other 5."""

    def make(compile_section: str, **kw):
        write_config(tmp_path / "exp.yaml", tiny_dataset, limit=3, **kw)
        (tmp_path / "opt.yaml").write_text("experiment: exp.yaml\ncompile:\n" + compile_section)
        return load_optimize_config(tmp_path / "opt.yaml")

    return make


def _lm(scripted_reply):
    from reflect_sql.lm.scripted import ScriptedLM

    return ScriptedLM(scripted_reply)


def test_overlapping_train_split_is_refused(opt_config, scripted_reply, tmp_path):
    from reflect_sql.optimize.compile import compile_program

    oc = opt_config("  train: {limit: 5}\n")
    lm = _lm(scripted_reply)
    with pytest.raises(UserError) as err:
        compile_program(oc, tmp_path / "p.json", lms=(lm, lm))
    message = str(err.value)
    assert "overlaps the evaluated questions in 3 of 5" in message
    assert "menu#100" in message and "How many dishes are there?" in message
    assert not lm.calls and not (tmp_path / "p.json").exists()

    oc = opt_config("  optimizer: labeled\n")
    with pytest.raises(UserError, match="needs a train split"):
        compile_program(oc, tmp_path / "p.json", lms=(lm, lm))

    # The same refusal through the command line: one line, exit code 2.
    (tmp_path / "opt.yaml").write_text("experiment: exp.yaml\ncompile:\n  train: {limit: 4}\n")
    assert main(["compile", str(tmp_path / "opt.yaml"), "--out", str(tmp_path / "p.json")]) == 2


@pytest.mark.parametrize("optimizer", ["labeled", "bootstrap"])
def test_compile_save_load_gives_identical_prompts_and_predictions(opt_config, scripted_reply, tmp_path, optimizer):
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.optimize.compile import compile_program

    oc = opt_config(f"  optimizer: {optimizer}\n  train: {{exclude_eval: true}}\n  max_labeled_demos: 2\n"
                    "  max_bootstrapped_demos: 1\n  judge_val_fraction: 0.4\n")
    lm = _lm(scripted_reply)
    out = tmp_path / "program.json"
    compiled, report = compile_program(oc, out, lms=(lm, lm))
    assert set(report["targets"]) == {"generator", "semantic_judge", "entailment_judge"}
    judge = report["targets"]["semantic_judge"]
    assert judge["labels"]["gold"] == 5 and sum(judge["labels"].values()) == 10  # one wrong query per question
    assert 0 <= judge["before"]["accuracy"] <= 1 and judge["after"]["n"] == judge["held_out_examples"]
    saved = json.loads(out.read_text())
    assert saved["metadata"]["reflect_sql"]["mode"] == "reflect"
    assert set(saved["metadata"]["reflect_sql"]["train"]["questions"]).isdisjoint({"100", "101", "102"})
    demos = {name: len(p.demos) for name, p in compiled.named_predictors()}
    assert demos["synthesis_loop.generator"] >= 1 and demos["synthesis_loop.judge"] >= 1
    for demo in compiled.synthesis_loop.generator.demos:
        assert set(demo) - {"augmented"} <= set(compiled.synthesis_loop.generator.signature.fields)

    questions = oc.experiment.dataset.load()
    runs = {}
    for way in ("in_memory", "eval_program_flag", "load_into"):
        run_lm = _lm(scripted_reply)
        factory = PipelineFactory(oc.experiment, tmp_path / way, lms=(run_lm, run_lm),
                                  program=out if way == "eval_program_flag" else None)
        predictions = []
        for q in questions:
            program = factory(q)
            if way == "in_memory":
                for (name, mine), (_, theirs) in zip(program.named_predictors(), compiled.named_predictors()):
                    mine.demos, mine.signature = theirs.demos, theirs.signature
            elif way == "load_into" and not getattr(program, "_loaded", False):
                load_into(program, out)
                program._loaded = True
            pred = program(question=q.question, evidence=q.evidence)
            predictions.append((pred.sql, [list(r) for r in pred.rows], pred.scores))
        factory.close()
        prompts = [entry["messages"] for entry in run_lm.history]
        runs[way] = (predictions, prompts)
    assert len(runs["in_memory"][1]) >= 3 * len(questions)  # every LM call's prompt was captured
    assert runs["eval_program_flag"] == runs["in_memory"] == runs["load_into"]
    # The demos reach the model: the generator's prompt carries a demo's question.
    demo_question = compiled.synthesis_loop.generator.demos[0]["question"]
    assert any(demo_question in json.dumps(messages) for messages in runs["in_memory"][1])


def test_export_shows_every_predictor_and_is_stable(opt_config, scripted_reply, tmp_path, monkeypatch, capsys):
    from reflect_sql.optimize.compile import compile_program

    monkeypatch.chdir(tmp_path)  # MLflow stores artifacts under the working directory
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    oc = opt_config("  optimizer: labeled\n  train: {exclude_eval: true}\n  max_labeled_demos: 2\n", mlflow_uri=uri)
    lm = _lm(scripted_reply)
    out = tmp_path / "program.json"
    compile_program(oc, out, lms=(lm, lm))
    program, mode = load_program(out)
    assert mode == "reflect"

    import mlflow
    from mlflow.artifacts import download_artifacts

    mlflow.set_tracking_uri(uri)
    (run,) = mlflow.search_runs(experiment_names=["tune-test"], output_format="list")
    assert run.info.run_name == "compile:program" and run.data.params["optimizer"] == "labeled"
    assert "semantic_judge.after.accuracy" in run.data.metrics
    logged = download_artifacts(run_id=run.info.run_id, artifact_path="program.json", tracking_uri=uri,
                                dst_path=str(tmp_path / "dl"))
    assert json.loads(open(logged).read())["metadata"]["reflect_sql"]["optimizer"] == "labeled"

    md_path, json_path = tmp_path / "prompts.md", tmp_path / "prompts.json"
    assert main(["export", str(out), "--format", "md", "--out", str(md_path)]) == 0
    assert main(["export", str(out), "--format", "json", "--out", str(json_path)]) == 0
    capsys.readouterr()
    assert main(["export", str(out), "--json"]) == 0  # --json, as every command takes it
    assert capsys.readouterr().out == json_path.read_text()
    exported = json.loads(json_path.read_text())
    markdown = md_path.read_text()
    assert sorted(exported["predictors"]) == predictor_names("reflect")
    for name, predictor in program.named_predictors():
        entry = exported["predictors"][name]
        assert entry["signature"] == predictor.signature.__name__
        assert entry["instructions"] == predictor.signature.instructions
        assert len(entry["demos"]) == len(predictor.demos)
        # system + one user/assistant pair per demo + the example's user message
        assert len(entry["messages"]) == 2 + 2 * len(predictor.demos)
        assert entry["messages"][0]["role"] == "system"
        assert predictor.signature.instructions.split("\n")[0].strip() in entry["messages"][0]["content"]
        assert entry["example_input"]["question"] in entry["messages"][-1]["content"]
        for demo in entry["demos"]:
            assert demo["question"] in json.dumps(entry["messages"])
        assert f"## Predictor `{name}`" in markdown
    assert exported["predictors"]["synthesis_loop.judge"]["demos"]  # LabeledFewShot anchors are there

    # Diff-friendly: the same program exports to the same bytes, and no timestamp or version leaks in.
    again = render(describe(load_program(out)[0]), "md")
    assert again == markdown
    for text in (markdown, json_path.read_text()):
        assert "dependency_versions" not in text and not re.search(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}", text)


def test_export_refuses_what_is_not_a_program(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"generator": {}}')
    assert main(["export", str(bad)]) == 2
    assert "not a saved DSPy program" in capsys.readouterr().err
    bad.write_text('{"something": {}, "metadata": {"dependency_versions": {}}}')
    assert main(["export", str(bad)]) == 2
    assert "match no program mode" in capsys.readouterr().err


def test_judge_agreement_metric_and_auc():
    import dspy

    from reflect_sql.experiments.calibration import auc
    from reflect_sql.optimize.compile import entailment_value, judge_metric
    from reflect_sql.settings import Settings

    s = Settings(beta=0.5, theta_e=3.0)
    metric = judge_metric(entailment_value, s.theta_e, s)
    right = dspy.Example(label=True)
    wrong = dspy.Example(label=False)
    high, low = dspy.Prediction(e_schema=4, e_data=3), dspy.Prediction(e_schema=2, e_data=3)
    assert metric(right, high) and not metric(right, low)
    assert metric(wrong, low) and not metric(wrong, high)
    assert not metric(right, dspy.Prediction(diagnosis="no scores"))
    assert auc([3, 2, 1], [True, False, False]) == 1.0
    assert auc([1, 1], [True, False]) == 0.5
    assert auc([1, 2], [True, True]) is None


def test_example_inputs_take_overrides_per_field_and_per_predictor():
    from reflect_sql.optimize.export import EXAMPLE_INPUTS, example_inputs
    from reflect_sql.signatures.semantic_judge import SemanticJudge
    from reflect_sql.signatures.sql_generator import GenerateSQL

    flat = example_inputs(GenerateSQL, {"question": "How many?", "unknown": "x"})
    assert flat["question"] == "How many?" and flat["dialect"] == EXAMPLE_INPUTS["dialect"]
    assert set(flat) == set(GenerateSQL.input_fields)
    scoped = {"question": "generic", "synthesis_loop.judge": {"sql": "SELECT 2"}}
    judge = example_inputs(SemanticJudge, scoped, "synthesis_loop.judge")
    assert judge["sql"] == "SELECT 2" and judge["question"] == "generic"
    assert example_inputs(GenerateSQL, scoped, "synthesis_loop.generator")["question"] == "generic"


def test_mipro_runs_end_to_end_on_a_scripted_lm(opt_config, scripted_reply, tmp_path):
    """MIPROv2 asks the LM to describe the data and propose instructions (signatures of its own);
    the scripted LM fills whatever fields they have."""
    from reflect_sql.lm.scripted import ScriptedLM, _output_fields
    from reflect_sql.optimize.compile import compile_program

    pipeline_roles = {"GenerateSQL", "RepairSQL", "SemanticJudge", "EntailmentJudge", "RetrievalJudge"}

    def reply(name, inputs):
        if name in pipeline_roles:
            return scripted_reply(name, inputs)
        return {field: f"a proposed {field}" for field in _output_fields() or []}

    oc = opt_config("  optimizer: mipro\n  targets: [generator]\n  train: {exclude_eval: true}\n"
                    "  max_labeled_demos: 1\n  max_bootstrapped_demos: 1\n")
    lm = ScriptedLM(reply)
    out = tmp_path / "mipro.json"
    program, report = compile_program(oc, out, lms=(lm, lm))
    proposer_calls = {name for name, _ in lm.calls} - pipeline_roles
    assert proposer_calls, "MIPROv2 proposed no instruction"
    assert report["targets"]["generator"]["after"]["n"] == 2
    loaded, mode = load_program(out)
    assert mode == "reflect"
    assert loaded.synthesis_loop.generator.signature.__name__ == "GenerateSQL"
    assert loaded.synthesis_loop.generator.signature.instructions == program.synthesis_loop.generator.signature.instructions


def test_compile_records_the_lm_and_the_command_and_its_file_loads_only_for_that_lm(opt_config, scripted_reply, tmp_path,
                                                                                     monkeypatch, capsys):
    """What `compile` saves is what a run on the same generator LM loads (by default once shipped
    under the model's name), and what a run on another LM refuses."""
    import hashlib

    import reflect_sql.lm.factory as factory
    from reflect_sql.programs import shipped

    lm = _lm(scripted_reply)
    monkeypatch.setattr(factory, "configure_lms", lambda settings: (lm, lm))
    opt_config("  optimizer: labeled\n  train: {exclude_eval: true}\n  max_labeled_demos: 1\n")
    out = tmp_path / "compiled" / "tiny-model.json"
    argv = ["compile", str(tmp_path / "opt.yaml"), "--out", str(out), "--targets", "generator",
            "--set", "lm=local/tiny-model"]
    assert main(argv) == 0
    meta = json.loads(out.read_text())["metadata"]["reflect_sql"]
    assert meta["lm"] == meta["judge_lm"] == "local/tiny-model"
    assert meta["command"] == "reflect-sql " + " ".join(argv)
    assert meta["optimizer"] == "labeled" and meta["train"]["questions"] and meta["report"]["targets"]["generator"]
    assert meta["commit"]

    capsys.readouterr()
    monkeypatch.setattr(shipped, "COMPILED_DIR", out.parent)
    chosen = shipped.resolve_program(None, "local/tiny-model")
    assert chosen.path == out.resolve() and chosen.sha256 == hashlib.sha256(out.read_bytes()).hexdigest()
    with pytest.raises(UserError, match="compiled for local/tiny-model, not for the generator LM local/other"):
        shipped.resolve_program(str(out), "local/other")
    assert capsys.readouterr().err == ""  # a program that records its LM loads without a warning


def test_a_judge_student_is_called_and_read_as_the_pipeline_calls_and_reads_it():
    import dspy

    from reflect_sql.lm.scripted import Probabilities, ScriptedLM
    from reflect_sql.optimize.compile import Student, entailment_value
    from reflect_sql.programs.invoke import make_predictor
    from reflect_sql.settings import Settings
    from reflect_sql.signatures.entailment_judge import EntailmentJudge

    settings = Settings()
    pipeline_judge = make_predictor(EntailmentJudge, 77, token_probabilities=True)
    student = Student(pipeline_judge)
    assert student.predict.config == pipeline_judge.config  # budget, stop marker and log-probabilities
    lm = ScriptedLM([{"e_schema": Probabilities({5: 0.5, 3: 0.5}), "e_data": Probabilities({4: 1.0}), "diagnosis": "none"}])
    with dspy.context(lm=lm):
        pred = student(question="q", evidence="", schema_context="CREATE TABLE t (a)", sql="SELECT a FROM t",
                       result_preview="1 row", check_findings="")
    assert (pred.e_schema, pred.e_data) == (4.0, 4.0) and pred.stated_scores == {"e_schema": 5, "e_data": 4}
    assert entailment_value(pred, settings) == 4.0


def test_labeled_anchors_alternate_right_and_wrong():
    import dspy

    from reflect_sql.optimize.compile import balanced

    examples = [dspy.Example(sql=f"right {i}", label=True) for i in range(6)] + \
        [dspy.Example(sql=f"wrong {i}", label=False) for i in range(2)]
    order = balanced(examples, seed=0)
    assert [e.label for e in order] == [True, False, True, False, True, True, True, True]
    assert balanced(examples, seed=0) == order and sorted(e.sql for e in order) == sorted(e.sql for e in examples)
    assert [e.sql for e in balanced(examples, seed=1)] != [e.sql for e in order]  # seeded, not fixed
    generator = [dspy.Example(sql=str(i)) for i in range(5)]
    assert sorted(e.sql for e in balanced(generator, seed=0)) == ["0", "1", "2", "3", "4"]


def test_judges_in_the_checks_form_are_not_compiled_from_scored_judgments(opt_config, scripted_reply, tmp_path):
    from dataclasses import replace

    from reflect_sql.optimize.compile import compile_program

    oc = opt_config("  train: {sample: 4, seed: 7, exclude_eval: true}\n")
    experiment = replace(oc.experiment, settings=oc.experiment.settings.model_copy(update={"judge_form": "checks"}))
    lm = _lm(scripted_reply)
    with pytest.raises(UserError, match="judge anchors in the scores form, not judge_form checks"):
        compile_program(replace(oc, experiment=experiment), tmp_path / "p.json", lms=(lm, lm),
                        targets=["entailment_judge"])
    assert not lm.calls and not (tmp_path / "p.json").exists()
    # The generator alone compiles under checks, and the file keeps the scored judges, the form
    # every saved program is read in.
    compile_program(replace(oc, experiment=experiment), tmp_path / "g.json", lms=(lm, lm), targets=["generator"])
    saved = json.loads((tmp_path / "g.json").read_text())
    prefixes = [f["prefix"] for f in saved["synthesis_loop.judge"]["signature"]["fields"]]
    assert "Query Logic:" in prefixes and "Logic Right:" not in prefixes
