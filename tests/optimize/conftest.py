"""Fixtures of the optimisation tests: a tiny BIRD-layout dataset and a scripted LM whose answers
depend on the thresholds and weights, so that tuning them changes EX and the LM calls.

The scripted pipeline: the generator answers a wrong query (``SELECT 0``) unless it was given
feedback, and then the gold query. The semantic judge scores C=9, J=5, Q=5 and G from 1 to 9
depending on the question, so S depends on the weights and the question; the entailment judge
scores E_schema=4, E_data=2, so E = 2 + 2*beta. A question is answered right exactly when a judge
falls below its threshold and feedback reaches the generator.
"""
from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

import pytest

QUESTIONS = [
    ("How many dishes are there?", "SELECT COUNT(*) FROM dish", "simple"),
    ("List the names of the desserts.", "SELECT d.name FROM dish AS d JOIN category AS c ON d.category_id = c.id WHERE c.name = 'dessert'", "simple"),
    ("What is the most expensive dish?", "SELECT name FROM dish ORDER BY price DESC LIMIT 1", "moderate"),
    ("What is the average price of the mains?", "SELECT AVG(d.price) FROM dish AS d JOIN category AS c ON d.category_id = c.id WHERE c.name = 'main'", "moderate"),
    ("How many dishes cost more than 10?", "SELECT COUNT(*) FROM dish WHERE price > 10", "simple"),
    ("Which categories have more than one dish?", "SELECT c.name FROM category AS c JOIN dish AS d ON d.category_id = c.id GROUP BY c.name HAVING COUNT(*) > 1", "challenging"),
    ("What share of the dishes are desserts?", "SELECT CAST(SUM(CASE WHEN c.name = 'dessert' THEN 1 ELSE 0 END) AS REAL) / COUNT(*) FROM dish AS d JOIN category AS c ON d.category_id = c.id", "challenging"),
    ("What is the cheapest main?", "SELECT d.name FROM dish AS d JOIN category AS c ON d.category_id = c.id WHERE c.name = 'main' ORDER BY d.price LIMIT 1", "moderate"),
]


@pytest.fixture()
def tiny_dataset(tmp_path: Path) -> Path:
    root = tmp_path / "bird"
    db_dir = root / "dev_databases" / "menu"
    db_dir.mkdir(parents=True)
    conn = sqlite3.connect(db_dir / "menu.sqlite")
    conn.executescript(
        """
        CREATE TABLE category (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE dish (id INTEGER PRIMARY KEY, name TEXT, price INTEGER,
                           category_id INTEGER REFERENCES category(id));
        INSERT INTO category VALUES (1, 'starter'), (2, 'main'), (3, 'dessert');
        INSERT INTO dish VALUES (1, 'soup', 6, 1), (2, 'steak', 24, 2), (3, 'risotto', 15, 2),
                                (4, 'tart', 8, 3), (5, 'sorbet', 5, 3), (6, 'salad', 7, 1), (7, 'fish', 19, 2);
        """
    )
    conn.commit()
    conn.close()
    entries = [
        {"question_id": 100 + i, "db_id": "menu", "question": q, "evidence": "", "SQL": sql, "difficulty": d}
        for i, (q, sql, d) in enumerate(QUESTIONS)
    ]
    (root / "dev.json").write_text(json.dumps(entries, indent=1))
    return root


def _write_config(path: Path, root: Path, *, limit: int | None = 4, mlflow_uri: str | None = None, extra: str = "") -> Path:
    mlflow = "{enabled: true, experiment: tune-test}" if mlflow_uri else "{enabled: false}"
    text = textwrap.dedent(f"""\
        name: tiny
        dataset: {{format: bird, root: {root}, split: dev, limit: {limit if limit is not None else 'null'}}}
        mode: reflect
        kb: {{enabled: false}}
        mlflow: {mlflow}
        settings:
          lm: scripted/test
          lm_cache: false
          use_enrichment: false
          max_retrieval_iterations: 1
          max_semantic_iterations: 2
          max_entailment_iterations: 2
    """)
    if mlflow_uri:
        text += f"  mlflow_uri: {mlflow_uri}\n"
    path.write_text(text + extra)
    return path


@pytest.fixture()
def write_config():
    return _write_config


def gold_by_question() -> dict[str, str]:
    return {q: sql for q, sql, _ in QUESTIONS}


def _position(question: str) -> int:
    return [q for q, _, _ in QUESTIONS].index(question)


def _role(name: str, inputs: dict) -> str:
    """The predictor, from its input fields: a loaded program's signatures may have lost their names."""
    if "result_preview" in inputs:
        return "EntailmentJudge"
    if "error" in inputs:
        return "RepairSQL"
    if "dialect" in inputs:
        return "GenerateSQL"
    if "sql" in inputs:
        return "SemanticJudge"
    if "diagnosis" in inputs:
        return "RetrievalJudge"
    return name


def _scripted_reply(name: str, inputs: dict) -> dict:
    name = _role(name, inputs)
    if name == "GenerateSQL":
        if inputs.get("feedback", "").strip():
            return {"sql": gold_by_question()[inputs["question"]]}
        return {"sql": "SELECT 0"}
    if name == "RepairSQL":
        return {"repaired_sql": "SELECT 0"}
    if name == "RetrievalJudge":
        return {"missing_aspects": [], "relevance": 6, "completeness": 6, "rewritten_question": inputs["question"]}
    if name == "SemanticJudge":
        return {"column_rationale": "ok", "column_consistency": 9, "granularity_rationale": "coarse",
                "granularity": 1 + 2 * (_position(inputs["question"]) % 5), "join_rationale": "so-so", "join_consistency": 5, "logic_rationale": "so-so",
                "query_logic": 5, "diagnosis": "check the aggregation"}
    if name == "EntailmentJudge":
        return {"e_schema": 4, "e_data": 2, "diagnosis": "the rows look off"}
    raise AssertionError(f"unexpected predictor {name}")


@pytest.fixture()
def scripted_factory():
    """``factory_for(trial_config, trial_dir)`` building the real pipeline on one scripted LM."""
    from reflect_sql.experiments.pipeline import PipelineFactory
    from reflect_sql.lm.scripted import ScriptedLM

    lm = ScriptedLM(_scripted_reply)

    def factory_for(config, out):
        return PipelineFactory(config, out, lms=(lm, lm))

    factory_for.lm = lm
    return factory_for


@pytest.fixture()
def scripted_reply():
    return _scripted_reply


@pytest.fixture(autouse=True)
def no_run_charts(monkeypatch):
    """Each trial is a full ``run_eval``, whose per-run charts (tested with the runner) cost seconds
    of matplotlib per trial here and show nothing about tuning."""
    from reflect_sql.experiments import runner

    monkeypatch.setattr(runner, "write_run_reports", lambda *args, **kwargs: None)
