"""The evaluation runner with a fake program: records, summary, predictions, resume, determinism."""
from __future__ import annotations

import json
import threading
from dataclasses import replace

import dspy
import pytest

from reflect_sql.errors import UserError
from reflect_sql.experiments.config import load_config
from reflect_sql.experiments.predictions import BIRD_SEPARATOR
from reflect_sql.experiments.results_log import ResultsLog
from reflect_sql.experiments.runner import run_eval

# What the fake program answers, by question: 10 right, 11 right (duplicates), 12 wrong order is
# still right for BIRD; 13 raises; question 12 is wrong via a bad column.
ANSWERS = {
    "names of fruit": "SELECT name FROM item WHERE kind = 'fruit'",
    "kinds": "SELECT kind FROM item",
    "cheapest first": "SELECT nope FROM item",
}


def fake_program(question: str, evidence: str = ""):
    if question == "explode":
        raise RuntimeError("boom")
    sql = ANSWERS[question]
    return dspy.Prediction(
        sql=sql, columns=["name"], rows=[("apple",)] if "fruit" in sql else [],
        scores={"retrieval": 7.0, "semantic": 8.0 if "nope" not in sql else 3.0, "entailment": 4.0},
        trace=[{"loop": "retrieval", "round": 0, "iteration": 0, "decision": "accept", "scores": {"score_r": 7.0},
                "inputs": {"big": "x" * 50}}],
        cost={"lm_calls": 3, "prompt_tokens": 100, "completion_tokens": 20, "seconds": 0.5},
        error=None, retrieved={"tables": ["item"], "columns": ["item.name"]},
    )


def write_config(tmp_path, root, **extra):
    lines = ["name: tiny", "dataset:", "  format: bird", f"  root: {root}", "mode: reflect", "threads: 2",
             "mlflow: {enabled: false}", "settings:", "  theta_r: 5"]
    lines += [f"{k}: {v}" for k, v in extra.items()]
    path = tmp_path / "tiny.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_run_writes_records_summary_and_bird_predictions(tiny_bird, tmp_path):
    config = load_config(write_config(tmp_path, tiny_bird))
    assert config.settings.theta_r == 5 and config.threads == 2
    out = tmp_path / "run"
    summary = run_eval(config, out, lambda q: fake_program, progress=False)
    assert summary["overall"] == 66.67 and summary["exceptions"] == 0
    assert summary["counts"] == {"simple": 1, "moderate": 1, "challenging": 1, "overall": 3}
    assert summary["cost"]["lm_calls"] == 9 and summary["cost"]["per_question"]["lm_calls"] == 3
    assert summary["statuses"] == {"correct": 2, "pred_error": 1}
    # Gold of 10 reads item.name and item.kind; the fake retrieval named item.name only.
    assert summary["recall"]["table"] == 1.0 and summary["recall"]["column"] < 1.0

    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["question_id"] for r in records) == [10, 11, 12]
    r10 = next(r for r in records if r["question_id"] == 10)
    assert r10["correct"] and r10["rows_digest"] and r10["row_count"] == 1
    assert r10["trace"]["path"] == [{"loop": "retrieval", "round": 0, "iteration": 0, "decision": "accept",
                                     "scores": {"score_r": 7.0}}]
    assert json.loads((out / "traces" / "10.json").read_text())[0]["inputs"]["big"] == "x" * 50
    preds = json.loads((out / "predict_dev.json").read_text())
    assert preds["0"] == ANSWERS["names of fruit"] + BIRD_SEPARATOR + "shop"
    assert json.loads((out / "summary.json").read_text())["overall"] == 66.67


def test_program_exception_is_recorded_not_fatal_and_retried_on_request(tiny_bird, tmp_path):
    data = json.loads((tiny_bird / "dev.json").read_text())
    data.append({**data[0], "question_id": 13, "question": "explode"})
    (tiny_bird / "dev.json").write_text(json.dumps(data))
    config = load_config(write_config(tmp_path, tiny_bird))
    summary = run_eval(config, tmp_path / "run", lambda q: fake_program, progress=False)
    assert summary["exceptions"] == 1 and summary["statuses"]["missing"] == 1
    # Question 12's SQL fails: an error the program reported, not a crash.
    assert summary["errors"] == 1
    results = tmp_path / "run" / "results.jsonl"
    record = [json.loads(l) for l in results.read_text().splitlines() if '"explode"' in l][0]
    assert record["exception"] == "RuntimeError: boom" and record["correct"] is False

    def fixed(question, evidence=""):
        return fake_program("names of fruit") if question == "explode" else fake_program(question)

    summary = run_eval(config, tmp_path / "run", lambda q: fixed, progress=False, retry_errors=True)
    assert summary["exceptions"] == 0 and summary["counts"]["overall"] == 4 and summary["overall"] == 75.0
    assert sorted(json.loads(l)["question_id"] for l in results.read_text().splitlines()) == [10, 11, 12, 13]


def test_a_question_that_cannot_be_asked_fails_alone_and_is_named(tiny_bird, tmp_path):
    from reflect_sql.errors import MAX_QUESTION_CHARS, require_question

    data = json.loads((tiny_bird / "dev.json").read_text())
    data.append({**data[0], "question_id": 14, "question": "names of fruit " * (MAX_QUESTION_CHARS // 10)})
    (tiny_bird / "dev.json").write_text(json.dumps(data))
    config = load_config(write_config(tmp_path, tiny_bird))

    def checked(question, evidence=""):  # the real programs check the question first, the same way
        require_question(question)
        return fake_program(question)

    summary = run_eval(config, tmp_path / "run", lambda q: checked, progress=False)
    assert summary["counts"]["overall"] == 4 and summary["exceptions"] == 0
    records = {json.loads(l)["question_id"]: json.loads(l)
               for l in (tmp_path / "run" / "results.jsonl").read_text().splitlines()}
    assert records[14]["correct"] is False and records[14]["error"].startswith("question 14 cannot be asked")
    assert "characters long" in records[14]["error"]
    assert records[10]["correct"] is True


def test_rerun_resumes_without_repeating_and_is_deterministic(tiny_bird, tmp_path):
    config = load_config(write_config(tmp_path, tiny_bird), limit=2)
    calls = []
    lock = threading.Lock()

    def counting(q):
        def program(**kw):
            with lock:
                calls.append(q.key)
            return fake_program(**kw)
        return program

    first = run_eval(config, tmp_path / "run", counting, progress=False)
    assert sorted(calls) == ["10", "11"] and first["counts"]["overall"] == 2
    full = load_config(write_config(tmp_path, tiny_bird))
    second = run_eval(full, tmp_path / "run", counting, progress=False)
    assert sorted(calls) == ["10", "11", "12"]  # only the new question ran
    lines = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3
    again = run_eval(full, tmp_path / "run2", lambda q: fake_program, progress=False)
    strip = lambda s: {k: v for k, v in s.items() if k not in ("wall_seconds", "cost", "fingerprint")}
    assert strip(second) == strip(again)


def test_resume_refuses_a_different_configuration(tiny_bird, tmp_path):
    run_eval(load_config(write_config(tmp_path, tiny_bird)), tmp_path / "run", lambda q: fake_program, progress=False)
    other = load_config(write_config(tmp_path, tiny_bird), ["theta_r=6"])
    with pytest.raises(UserError, match="different configuration"):
        run_eval(other, tmp_path / "run", lambda q: fake_program, progress=False)


def test_results_log_recovers_from_a_cut_last_line(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_text('{"question_id": 1, "sql": "a"}\n{"question_id": 2, "sql": "b"}\n{"question_id": 3, "sq')
    with ResultsLog(path) as log:
        assert set(log.records) == {"1", "2"} and log.dropped_partial
        log.append({"question_id": 3, "sql": "c"})
        log.append({"question_id": 1, "sql": "again"})  # already there: not doubled
    assert [json.loads(l)["question_id"] for l in path.read_text().splitlines()] == [1, 2, 3]
    # A whole record whose newline was cut is kept and terminated.
    path.write_text('{"question_id": 1, "sql": "a"}\n{"question_id": 2, "sql": "b"}')
    with ResultsLog(path) as log:
        log.append({"question_id": 3, "sql": "c"})
    assert [json.loads(l)["question_id"] for l in path.read_text().splitlines()] == [1, 2, 3]
    path.write_text('{"question_id": 1}\n{garbage\n{"question_id": 3}\n')
    with pytest.raises(UserError, match="line 2 is corrupt"):
        ResultsLog(path)


def test_config_errors_are_clear(tiny_bird, tmp_path):
    path = write_config(tmp_path, tiny_bird, colour="blue")
    with pytest.raises(UserError, match="unknown key.*colour"):
        load_config(path)
    path = write_config(tmp_path, tiny_bird)
    with pytest.raises(UserError, match="--set nonsense"):
        load_config(path, ["nonsense=1"])
    with pytest.raises(UserError, match="theta_r"):
        load_config(path, ["theta_r=99"])
    cfg = load_config(path, ["mode=single-pass", "dataset.sample=2", "dataset.seed=3", "use_entailment=false"])
    assert (cfg.mode, cfg.dataset.sample, cfg.dataset.seed, cfg.settings.use_entailment) == ("single-pass", 2, 3, False)


def test_extends_merges_sections(tiny_bird, tmp_path):
    base = write_config(tmp_path, tiny_bird)
    (tmp_path / "variant.yaml").write_text("extends: tiny.yaml\nsettings:\n  use_entailment: false\n")
    cfg = load_config(tmp_path / "variant.yaml")
    assert cfg.name == "variant" and cfg.settings.theta_r == 5 and cfg.settings.use_entailment is False
    assert cfg.dataset.root == tiny_bird and cfg.fingerprint() != load_config(base).fingerprint()


def test_a_run_resumed_on_other_code_records_every_commit_it_ran_on(tiny_bird, tmp_path, monkeypatch):
    from reflect_sql.experiments import runner, tracking

    config = load_config(write_config(tmp_path, tiny_bird), limit=2)
    full = load_config(write_config(tmp_path, tiny_bird))
    out = tmp_path / "run"
    monkeypatch.setattr(runner, "git_commit", lambda: "aaa")
    run_eval(config, out, lambda q: fake_program, progress=False)
    monkeypatch.setattr(runner, "git_commit", lambda: "bbb")
    run_eval(full, out, lambda q: fake_program, progress=False)
    run_eval(full, out, lambda q: fake_program, progress=False)  # nothing left: evaluates no question
    monkeypatch.setattr(runner, "git_commit", lambda: "ccc")
    run_eval(full, out, lambda q: fake_program, progress=False)

    sessions = json.loads((out / "run.json").read_text())["sessions"]
    assert [(s["commit"], s["evaluated"]) for s in sessions] == [("aaa", 2), ("bbb", 1), ("bbb", 0), ("ccc", 0)]
    assert tracking.session_commits(out) == ["aaa", "bbb"]
    # MLflow's git_commit names the code that answered, not whatever is checked out when logging.
    assert tracking.params_of(full, tracking.session_commits(out))["git_commit"] == "aaa,bbb"
    assert tracking.session_commits(tmp_path / "nowhere") == []


def test_scoring_accepts_every_value_the_runs_engine_may_return(tiny_bird, tmp_path):
    # A 70 MB value: past the 64 MiB default the prediction is an error; a run whose engine cap was
    # raised to 128 MiB scores it (merely wrong). A lowered cap leaves scoring at the default.
    def big(question, evidence=""):
        return dspy.Prediction(sql="SELECT length(randomblob(70000000))", rows=[], scores={}, cost={})

    statuses = {}
    for cap in (2**20, 64 * 2**20, 128 * 2**20):
        config = load_config(write_config(tmp_path, tiny_bird), limit=1)
        config.settings = config.settings.model_copy(update={"max_value_bytes": cap})
        summary = run_eval(config, tmp_path / f"cap{cap}", lambda q: big, progress=False)
        statuses[cap] = summary["statuses"]
    assert statuses == {2**20: {"pred_error": 1}, 64 * 2**20: {"pred_error": 1}, 128 * 2**20: {"wrong": 1}}


def test_the_value_cap_is_in_the_fingerprint_only_once_changed(tiny_bird, tmp_path):
    from reflect_sql.experiments.config import _IN_FINGERPRINT_WHEN_CHANGED

    config = load_config(write_config(tmp_path, tiny_bird))
    capped = replace(config, settings=config.settings.model_copy(update={"max_value_bytes": 2**20}))
    # The fingerprint of a default config is what it was before max_value_bytes existed, so runs
    # started then still resume; a changed cap changes it, so a resume cannot mix two caps.
    data = config.settings.model_dump(mode="json")
    for key in _IN_FINGERPRINT_WHEN_CHANGED:
        data.pop(key)

    class SettingsBeforeTheCap:  # what the fingerprint read of settings before the key existed
        def model_dump(self, mode):
            return data

    older = replace(config, settings=SettingsBeforeTheCap())
    assert config.fingerprint() == older.fingerprint() != capped.fingerprint()


def test_each_evaluation_starts_with_cold_prompt_caches(tiny_bird, tmp_path, monkeypatch):
    from reflect_sql.lm import local_engine

    # A model an earlier run in this process loaded, with the prompt states its cache holds.
    monkeypatch.setitem(local_engine._servers, ("model.gguf", 4096, 2), object())
    seen = []

    def program(question, evidence=""):
        seen.append(dict(local_engine._servers))
        return fake_program(question, evidence)

    run_eval(load_config(write_config(tmp_path, tiny_bird)), tmp_path / "run", lambda q: program, progress=False)
    assert seen and all(servers == {} for servers in seen)
    assert local_engine.forget_prompt_caches() == 0
