"""Compiled programs: the one shipped for the generator LM loads by default in ask, eval, ablate,
tune and demo; ``--program none`` runs the bare signatures; a program compiled for another LM is
refused; run.json and MLflow record the program's path and sha256; a resumed run keeps it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from reflect_sql.cli import main
from reflect_sql.programs import shipped

LM = "local/tiny-test"
MARKER = "How many zebras live in the demo zoo?"  # the question of the demo the compiled generator carries


def save_compiled(path: Path, lm: str | None, mode: str = "reflect") -> Path:
    """A program saved as ``compile`` saves one: a skeleton whose generator carries one demo."""
    from reflect_sql.optimize.program_io import save_program, skeleton

    program = skeleton(mode)
    generator = dict(program.named_predictors())["synthesis_loop.generator" if mode == "reflect" else "generator"]
    generator.demos = [{"question": MARKER, "evidence": "", "dialect": "sqlite", "schema_context": "zoo(id, kind)",
                        "examples": "", "feedback": "", "sql": "SELECT COUNT(*) FROM zoo WHERE kind = 'zebra'"}]
    metadata = {"mode": mode, "optimizer": "labeled"}
    if lm is not None:
        metadata["lm"] = lm
    return save_program(program, path, metadata)


@pytest.fixture()
def compiled_dir(tmp_path, monkeypatch):
    """The shipped-programs folder, moved to a tmp dir holding the program of ``local/tiny-test``."""
    folder = tmp_path / "compiled"
    monkeypatch.setattr(shipped, "COMPILED_DIR", folder)
    save_compiled(folder / "tiny-test.json", LM)
    return folder


@pytest.fixture()
def scripted(monkeypatch, tiny_bird):
    """``configure_lms`` gives one oracle ScriptedLM (gold SQL, top judge scores) for both roles."""
    import reflect_sql.lm.factory as factory
    from reflect_sql.experiments.datasets import load_questions
    from reflect_sql.experiments.scripted import oracle_script
    from reflect_sql.lm.scripted import ScriptedLM

    (tiny_bird / "dev_tables.json").unlink()  # a stub there; the schema is read from the database
    questions = load_questions("bird", tiny_bird / "dev.json", tiny_bird / "dev_databases")
    lm = ScriptedLM(oracle_script(questions))
    lm.configured = 0

    def configure(settings):
        lm.configured += 1
        return lm, lm

    monkeypatch.setattr(factory, "configure_lms", configure)
    return lm


def demo_seen(lm) -> bool:
    return any(MARKER in json.dumps(entry["messages"]) for entry in lm.history)


def write_experiment(tmp_path, root, *, lm=LM, mode="reflect", mlflow_uri=None, name="tiny") -> Path:
    mlflow = "{enabled: true, experiment: program-test}" if mlflow_uri else "{enabled: false}"
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ndataset: {{format: bird, root: {root}}}\nmode: {mode}\nthreads: 1\nkb: {{enabled: false}}\n"
        f"mlflow: {mlflow}\nsettings:\n  lm: {lm}\n  lm_cache: false\n  use_enrichment: false\n"
        + (f"  mlflow_uri: '{mlflow_uri}'\n" if mlflow_uri else ""))
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- resolution --------------------------------------------------------------------------------


def test_the_default_is_chosen_by_the_generator_lm_name(compiled_dir, capsys):
    save_compiled(compiled_dir / "other-model.json", "local/other-model")
    chosen = shipped.resolve_program(None, LM)
    assert chosen.source == "default" and chosen.path == (compiled_dir / "tiny-test.json").resolve()
    assert chosen.sha256 == sha256(compiled_dir / "tiny-test.json") and chosen.compiled_for == LM
    other = shipped.resolve_program(None, "local/other-model")
    assert other.path == (compiled_dir / "other-model.json").resolve() and other.sha256 != chosen.sha256
    # No file for the LM, or an LM that is not embedded: the bare signatures, and the record says why.
    for lm in ("local/no-such-model", "openai/gpt-4o"):
        bare = shipped.resolve_program(None, lm)
        assert bare.bare and bare.source == "no default"
        assert bare.to_json()["path"] == "none" and bare.to_json()["sha256"] is None
        assert "no compiled program ships for " + lm in bare.to_json()["description"]
    # --program none: bare even when a default exists.
    assert shipped.resolve_program("none", LM).bare
    assert capsys.readouterr().err == ""  # nothing to warn about


# --- eval ----------------------------------------------------------------------------------------


def test_eval_loads_the_default_program_and_records_its_path_and_sha256(compiled_dir, scripted, tiny_bird, tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    config = write_experiment(tmp_path, tiny_bird, mlflow_uri=uri)
    out = tmp_path / "run"
    assert main(["eval", str(config), "--out", str(out), "--no-progress"]) == 0
    assert demo_seen(scripted)  # the compiled generator's demo reached the model
    expected = {"path": str((compiled_dir / "tiny-test.json").resolve()), "sha256": sha256(compiled_dir / "tiny-test.json")}
    for name in ("run.json", "summary.json"):
        program = json.loads((out / name).read_text())["program"]
        assert {k: program[k] for k in expected} == expected and program["source"] == "default"
    assert "program: " + expected["path"] in capsys.readouterr().out

    import mlflow

    mlflow.set_tracking_uri(uri)
    [run] = mlflow.search_runs(experiment_names=["program-test"], output_format="list")
    assert run.data.params["program"] == expected["path"]
    assert run.data.params["program_sha256"] == expected["sha256"]


def test_run_json_names_the_predictors_a_loaded_file_leaves_bare(compiled_dir, scripted, tiny_bird, tmp_path, capsys):
    config = write_experiment(tmp_path, tiny_bird)
    out = tmp_path / "run"
    assert main(["eval", str(config), "--out", str(out), "--no-progress"]) == 0
    assert json.loads((out / "run.json").read_text())["program"]["bare_predictors"] == []
    assert "run bare" not in capsys.readouterr().err


def test_judges_asked_in_the_checks_form_are_named_bare_and_told(compiled_dir, scripted, tiny_bird, tmp_path, capsys):
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.runner import run_eval

    choice = shipped.resolve_program(None, LM)
    assert shipped.bare_predictors(choice, load_config(write_experiment(tmp_path, tiny_bird)).settings, "reflect") == []
    config = load_config(write_experiment(tmp_path, tiny_bird), ["judge_form=checks"])
    bare = shipped.bare_predictors(choice, config.settings, "reflect")
    assert bare == ["entailment_loop.judge", "synthesis_loop.judge"]
    # The file's generator still loads: only the roles asked in another form are bare.
    assert "synthesis_loop.generator" not in bare
    assert shipped.bare_predictors(shipped.resolve_program("none", LM), config.settings, "reflect") == []
    out = tmp_path / "run"
    run_eval(config, out, progress=False)  # the oracle does not answer the checks form: its questions fail
    assert json.loads((out / "run.json").read_text())["program"]["bare_predictors"] == bare
    err = capsys.readouterr().err
    assert "entailment_loop.judge, synthesis_loop.judge" in err and "run bare" in err


def test_program_none_runs_the_bare_signatures_even_when_a_default_exists(compiled_dir, scripted, tiny_bird, tmp_path):
    config = write_experiment(tmp_path, tiny_bird)
    out = tmp_path / "run"
    assert main(["eval", str(config), "--out", str(out), "--no-progress", "--program", "none"]) == 0
    assert scripted.history and not demo_seen(scripted)
    program = json.loads((out / "run.json").read_text())["program"]
    assert program["path"] == "none" and program["sha256"] is None and program["source"] == "none"
    assert json.loads((out / "summary.json").read_text())["overall"] == 100.0  # the bare run is a real run


def test_a_program_compiled_for_another_lm_is_refused_in_one_line(compiled_dir, scripted, tiny_bird, tmp_path, capsys):
    foreign = save_compiled(tmp_path / "foreign.json", "local/qwen2.5-coder-0.5b")
    config = write_experiment(tmp_path, tiny_bird)
    code = main(["eval", str(config), "--out", str(tmp_path / "run"), "--no-progress", "--program", str(foreign)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "compiled for local/qwen2.5-coder-0.5b, not for the generator LM local/tiny-test" in err
    assert scripted.configured == 0 and not scripted.history  # refused before any LM was built
    # The shipped file of an LM is checked the same way: one whose metadata names another LM is refused.
    save_compiled(compiled_dir / "tiny-test.json", "local/something-else")
    assert main(["eval", str(config), "--out", str(tmp_path / "run2"), "--no-progress"]) == 2
    assert "compiled for local/something-else" in capsys.readouterr().err


def test_a_program_without_lm_metadata_loads_with_a_warning(compiled_dir, scripted, tiny_bird, tmp_path, capsys):
    older = save_compiled(tmp_path / "older.json", None)
    config = write_experiment(tmp_path, tiny_bird)
    out = tmp_path / "run"
    assert main(["eval", str(config), "--out", str(out), "--no-progress", "--program", str(older)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [f"reflect-sql: warning: {older.resolve()} records no LM it was compiled for "
                        f"(compiled before LMs were recorded); loading it for {LM}"]
    assert demo_seen(scripted)
    program = json.loads((out / "run.json").read_text())["program"]
    assert program["path"] == str(older.resolve()) and program["compiled_for"] is None and program["source"] == "file"


def test_a_resumed_run_refuses_another_program(compiled_dir, scripted, tiny_bird, tmp_path, capsys):
    config = write_experiment(tmp_path, tiny_bird)
    out = tmp_path / "run"
    assert main(["eval", str(config), "--out", str(out), "--no-progress", "--limit", "2"]) == 0
    results = (out / "results.jsonl").read_text()
    capsys.readouterr()
    code = main(["eval", str(config), "--out", str(out), "--no-progress", "--program", "none"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"holds a run of program {(compiled_dir / 'tiny-test.json').resolve()}" in err and "not none" in err
    # A changed shipped file is another program too.
    save_compiled(compiled_dir / "tiny-test.json", LM, mode="single-pass")
    assert main(["eval", str(config), "--out", str(out), "--no-progress"]) == 2
    assert (out / "results.jsonl").read_text() == results  # nothing ran
    # The same program resumes.
    (compiled_dir / "tiny-test.json").unlink()
    save_compiled(compiled_dir / "tiny-test.json", LM)
    assert main(["eval", str(config), "--out", str(out), "--no-progress"]) == 0
    assert len((out / "results.jsonl").read_text().splitlines()) == 3


def test_a_reflect_program_gives_its_generator_to_a_single_pass_run(compiled_dir, scripted, tiny_bird, tmp_path):
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.pipeline import PipelineFactory

    config = load_config(write_experiment(tmp_path, tiny_bird, mode="single-pass"))
    factory = PipelineFactory(config, tmp_path / "run", lms=(scripted, scripted))
    try:
        (q, *_) = config.dataset.load()
        program = factory(q)
        assert factory.program.mode == "reflect" and [len(p.demos) for _, p in program.named_predictors()] == [1]
        assert program.generator.signature.__name__ == "GenerateSQL"  # the name survives the load
        program(question=q.question, evidence=q.evidence)
    finally:
        factory.close()
    assert demo_seen(scripted)


# --- ask, demo, ablate, tune ------------------------------------------------------------------


def test_ask_loads_the_default_program_and_says_which(compiled_dir, scripted, tiny_bird, tmp_path, capsys):
    db = str(tiny_bird / "dev_databases" / "shop" / "shop.sqlite")
    ask = ["ask", "--db", db, "--json", "--set", f"lm={LM}", "--set", "lm_cache=false", "--no-enrichment"]
    assert main([*ask, "names of fruit"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["sql"] == "SELECT name FROM item WHERE kind = 'fruit'"
    assert f"program: {(compiled_dir / 'tiny-test.json').resolve()} (shipped for {LM}" in captured.err
    assert demo_seen(scripted)

    scripted.history.clear()
    assert main([*ask, "--program", "none", "names of fruit"]) == 0
    assert "program: bare signatures (--program none)" in capsys.readouterr().err
    assert scripted.history and not demo_seen(scripted)

    foreign = save_compiled(tmp_path / "foreign.json", "local/other")
    assert main([*ask, "--program", str(foreign), "names of fruit"]) == 2
    assert "compiled for local/other, not for the generator LM local/tiny-test" in capsys.readouterr().err


def test_demo_passes_program_on_and_refuses_a_foreign_one_before_building_anything(compiled_dir, tmp_path, capsys):
    foreign = save_compiled(tmp_path / "foreign.json", "local/other")
    db = tmp_path / "demo.sqlite"
    assert main(["demo", "--db", str(db), "--kb-dir", str(tmp_path / "kb"), "--lm", LM, "--program", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "compiled for local/other" in err
    assert not db.exists()


@pytest.mark.slow
def test_ablate_variants_load_the_default_program_by_role(compiled_dir, scripted, tiny_bird, tmp_path):
    write_experiment(tmp_path, tiny_bird, name="full")
    (tmp_path / "single.yaml").write_text("extends: full.yaml\nname: single\nmode: single-pass\n")
    (tmp_path / "set.yaml").write_text("name: abl\nvariants: [full.yaml, single.yaml]\n")
    out = tmp_path / "abl"
    assert main(["ablate", str(tmp_path / "set.yaml"), "--out", str(out), "--no-progress", "--no-mlflow"]) == 0
    digest = sha256(compiled_dir / "tiny-test.json")
    for variant in ("full", "single"):
        assert json.loads((out / variant / "run.json").read_text())["program"]["sha256"] == digest
    prompts = [json.dumps(e["messages"]) for e in scripted.history]
    assert sum(MARKER in p for p in prompts) >= 6  # 3 questions per variant, each generation with the demo

    assert main(["ablate", str(tmp_path / "set.yaml"), "--out", str(tmp_path / "bare"), "--no-progress",
                 "--no-mlflow", "--program", "none"]) == 0
    assert json.loads((tmp_path / "bare" / "single" / "run.json").read_text())["program"]["path"] == "none"


@pytest.mark.slow
def test_tune_trials_run_the_program_and_a_resumed_study_keeps_it(compiled_dir, scripted, tiny_bird, tmp_path, capsys):
    config = write_experiment(tmp_path, tiny_bird)
    out = tmp_path / "tune"
    tune = ["tune", str(config), "--out", str(out), "--trials", "1"]
    assert main(tune) == 0
    assert demo_seen(scripted)
    [trial_run] = out.glob("trials/*/run.json")
    assert json.loads(trial_run.read_text())["program"]["sha256"] == sha256(compiled_dir / "tiny-test.json")
    assert "--program " + str((compiled_dir / "tiny-test.json").resolve()) in (out / "best_config.yaml").read_text()
    capsys.readouterr()
    assert main([*tune[:-1], "2", "--program", "none"]) == 2
    assert "runs program " + str((compiled_dir / "tiny-test.json").resolve()) in capsys.readouterr().err


# --- the shipped files ---------------------------------------------------------------------------

SHIPPED_DIR = shipped.COMPILED_DIR  # read at import, before tests/conftest.py hides it from every test
SHIPPED = sorted(SHIPPED_DIR.glob("*.json"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_each_shipped_program_is_named_by_its_lm_and_runs_offline(path, monkeypatch, tiny_bird, tmp_path):
    """Each file in programs/compiled/ is the default of the model it is named by, carries what
    reproduces it, and loads and runs in both modes on a scripted LM."""
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.experiments.scripted import oracle_script
    from reflect_sql.lm.scripted import ScriptedLM

    monkeypatch.setattr(shipped, "COMPILED_DIR", SHIPPED_DIR)
    (tiny_bird / "dev_tables.json").unlink()  # a stub there; the schema is read from the database
    meta = json.loads(path.read_text())["metadata"]["reflect_sql"]
    assert meta["lm"] == f"local/{path.stem}"
    for key in ("optimizer", "train", "command", "report"):
        assert meta.get(key), key
    choice = shipped.resolve_program(None, meta["lm"])
    assert choice.path == path.resolve()
    for mode in ("reflect", "single-pass"):
        config = load_config(write_experiment(tmp_path, tiny_bird, lm=meta["lm"], mode=mode))
        questions = config.dataset.load()
        lm = ScriptedLM(oracle_script(questions))
        factory = PipelineFactory(config, tmp_path / mode, lms=(lm, lm))
        try:
            q = questions[0]
            prediction = factory(q)(question=q.question, evidence=q.evidence)
        finally:
            factory.close()
        assert factory.program.sha256 == choice.sha256 and prediction.sql


@pytest.mark.parametrize("optimizer", ["labeled", "mipro", None])
def test_a_file_brings_demos_and_only_an_instruction_optimizer_brings_instructions(optimizer, tmp_path):
    """A compiled file saves each signature's text as it was on the day of the compile; the code's
    field descriptions win, and its instructions unless the optimizer wrote them. A DSPy program
    saved by other means (no optimizer recorded) loads as DSPy loads it."""
    from reflect_sql.optimize.config import OPTIMIZERS
    from reflect_sql.optimize.program_io import load_program, skeleton

    assert set(shipped.WRITES_INSTRUCTIONS) <= set(OPTIMIZERS)
    path = save_compiled(tmp_path / "p.json", LM)
    state = json.loads(path.read_text())
    saved = state["synthesis_loop.generator"]["signature"]
    saved["instructions"] = "Old instructions."
    for field in saved["fields"]:
        field["description"] = "An old description."
    if optimizer is None:
        del state["metadata"]["reflect_sql"]["optimizer"]
    else:
        state["metadata"]["reflect_sql"]["optimizer"] = optimizer
    path.write_text(json.dumps(state))

    loaded, _ = load_program(path)
    generator = loaded.synthesis_loop.generator
    code = dict(skeleton("reflect").named_predictors())["synthesis_loop.generator"].signature
    assert generator.demos[0]["question"] == MARKER and generator.signature.__name__ == "GenerateSQL"
    descriptions = {n: f.json_schema_extra["desc"] for n, f in generator.signature.fields.items()}
    if optimizer is None:
        assert generator.signature.instructions == "Old instructions."
        assert set(descriptions.values()) == {"An old description."}
    else:
        assert descriptions == {n: f.json_schema_extra["desc"] for n, f in code.fields.items()}
        expected = "Old instructions." if optimizer == "mipro" else code.instructions
        assert generator.signature.instructions == expected


def test_judges_on_a_judge_lm_of_their_own_run_bare(compiled_dir, scripted, tiny_bird, tmp_path, capsys):
    from reflect_sql.experiments.assembly import assemble
    from reflect_sql.experiments.config import load_config

    choice = shipped.resolve_program(None, LM)
    judge_demo = {"question": MARKER, "schema_context": "zoo(id, kind)", "sql": "SELECT 1"}
    choice.state["entailment_loop.judge"]["demos"] = [judge_demo]
    same = load_config(write_experiment(tmp_path, tiny_bird), [f"judge_lm={LM}"])
    assert shipped.bare_predictors(choice, same.settings, "reflect") == []
    other = load_config(write_experiment(tmp_path, tiny_bird), ["judge_lm=local/another-model"])
    assert shipped.bare_predictors(choice, other.settings, "reflect") == [
        "entailment_loop.judge", "retrieval_loop.judge", "synthesis_loop.judge"]

    def demos(settings):
        from reflect_sql.db.schema import Schema
        from reflect_sql.programs.retriever import SchemaRetriever

        retriever = SchemaRetriever(Schema("sqlite", []))
        program = assemble(settings, choice, lms=(scripted, scripted)).program(None, retriever)
        return {path: len(p.demos) for path, p in program.named_predictors()}

    assert demos(same.settings)["entailment_loop.judge"] == 1
    # The generator keeps the demos its own LM was compiled with; the judges on another LM get none.
    assert demos(other.settings) == {"retrieval_loop.judge": 0, "synthesis_loop.generator": 1,
                                     "synthesis_loop.repairer": 0, "synthesis_loop.judge": 0,
                                     "entailment_loop.judge": 0}
