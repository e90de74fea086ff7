"""``reflect-sql score`` keeps the official BIRD verdicts while reusing connections, and starts light.

The official rule here is ``bench/score_speed.py``'s re-implementation (a fresh connection per
question, ``set(pred) == set(gold)``, any error wrong); the hand-made predictions include a TEMP
VIEW that shadows a real table, which a reused connection would carry into the next question.
"""
from __future__ import annotations

import importlib.util
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reflect_sql.cli import main
from reflect_sql.experiments import metrics
from reflect_sql.experiments.datasets import load_dataset
from reflect_sql.experiments.scoring import score_predictions

REPO = Path(__file__).resolve().parents[2]
SEP = "\t----- bird -----\t"
SLOW = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500000000) SELECT count(*) FROM c"


def _bench():
    spec = importlib.util.spec_from_file_location("score_speed_bench", REPO / "bench" / "score_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _superhero_questions(benchmarks_dir: Path, n: int) -> list[dict]:
    questions = json.loads((benchmarks_dir / "bird" / "dev.json").read_text())
    return [q for q in questions if q["db_id"] == "superhero"][:n]


def test_official_rule_and_score_agree_question_by_question(benchmarks_dir, tmp_path, capsys):
    questions = _superhero_questions(benchmarks_dir, 9)
    gold = [q["SQL"].strip().rstrip(";") for q in questions]
    preds = [
        gold[0],  # right
        f"SELECT DISTINCT * FROM ({gold[1]})",  # right: BIRD ignores duplicates
        f"SELECT * FROM ({gold[2]}) LIMIT 0",  # wrong rows
        gold[3].replace("SELECT", "SELEC", 1),  # syntax error
        "SELECT COUNT(*) FROM no_such_table",  # runtime error
        "CREATE TEMP VIEW superhero AS SELECT 1 AS id",  # shadows a table, on this connection only
        gold[6],  # right, as long as the view above did not outlive its question
        "SELECT 1; SELECT 2",  # two statements: an error
        "SELECT 'not the answer'",  # wrong rows
    ]
    (tmp_path / "dev.json").write_text(json.dumps(questions))
    predictions = tmp_path / "predict_dev.json"
    predictions.write_text(json.dumps({str(i): p + SEP + "superhero" for i, p in enumerate(preds)}))
    db_root = benchmarks_dir / "bird" / "dev_databases"

    _bench().official_rule(str(tmp_path / "dev.json"), str(db_root), str(predictions), str(tmp_path / "official.jsonl"))
    capsys.readouterr()
    official = [json.loads(line) for line in (tmp_path / "official.jsonl").read_text().splitlines()]
    code = main(["score", "--dataset", "bird", "--questions", str(tmp_path / "dev.json"), "--db-root", str(db_root),
                 "--predictions", str(predictions), "--details", str(tmp_path / "ours.jsonl"), "--json"])
    assert code == 0
    ours = [json.loads(line) for line in (tmp_path / "ours.jsonl").read_text().splitlines()]

    assert [o["question_id"] for o in ours] == [o["question_id"] for o in official] == [q["question_id"] for q in questions]
    assert [o["correct"] for o in ours] == [o["correct"] for o in official]
    assert [o["correct"] for o in ours][:4] == [True, True, False, False]
    assert ours[6]["correct"] and ours[7]["status"] == "pred_error" and not ours[8]["correct"]


def test_bench_predictions_have_both_verdicts_and_agree(benchmarks_dir, tmp_path, capsys):
    bench = _bench()
    questions = _superhero_questions(benchmarks_dir, 30)
    (tmp_path / "dev.json").write_text(json.dumps(questions))
    wrong = bench.make_predictions(questions, tmp_path / "p.json")
    assert wrong == 30 // bench.WRONG_EVERY
    db_root = str(benchmarks_dir / "bird" / "dev_databases")
    bench.official_rule(str(tmp_path / "dev.json"), db_root, str(tmp_path / "p.json"), str(tmp_path / "o.jsonl"))
    assert main(["score", "--dataset", "bird", "--questions", str(tmp_path / "dev.json"), "--db-root", db_root,
                 "--predictions", str(tmp_path / "p.json"), "--details", str(tmp_path / "d.jsonl"), "--json"]) == 0
    capsys.readouterr()
    official = [json.loads(line)["correct"] for line in (tmp_path / "o.jsonl").read_text().splitlines()]
    ours = [json.loads(line)["correct"] for line in (tmp_path / "d.jsonl").read_text().splitlines()]
    assert ours == official and set(ours) == {True, False}


def test_a_stateful_or_timed_out_connection_is_not_reused(tiny_bird):
    db = tiny_bird / "dev_databases" / "shop" / "shop.sqlite"
    gold = "SELECT name FROM item WHERE kind = 'fruit'"
    with metrics.Scorer("bird", timeout_s=0.3) as scorer:
        assert scorer.match(gold, gold, db).correct
        # On its own connection the view shadows the table for the gold query too (as officially)...
        assert not scorer.match("CREATE TEMP VIEW item AS SELECT 'x' AS name, 'fruit' AS kind", gold, db).correct
        # ...but the next question gets a connection without it.
        assert scorer.match(gold, gold, db).correct
        assert scorer.match("PRAGMA case_sensitive_like = 1", "SELECT 1 WHERE 0", db).correct  # no rows, as gold
        assert scorer.match("SELECT name FROM item WHERE name LIKE 'APPLE'", "SELECT 'apple'", db).correct
        started = time.monotonic()
        assert scorer.match(SLOW, "SELECT 1", db).status == "pred_timeout"
        assert time.monotonic() - started < 3
        assert scorer.match("SELECT 1", SLOW, db).status == "gold_timeout"
        assert scorer.match(gold, gold, db).correct
        assert scorer.match("DELETE FROM item", "SELECT name FROM item WHERE 0", db).status == "pred_error"
    assert sqlite3.connect(db).execute("SELECT count(*) FROM item").fetchone()[0] == 4


def test_the_watchdog_interrupts_a_query_at_its_deadline_and_a_late_interrupt_is_harmless(tiny_bird):
    conn = metrics.connect_read_only(tiny_bird / "dev_databases" / "shop" / "shop.sqlite")  # no progress handler
    started = time.monotonic()
    token = metrics._WATCHDOG.watch(conn, started + 0.2)
    with pytest.raises(sqlite3.OperationalError, match="interrupt"):
        conn.execute(SLOW).fetchall()
    metrics._WATCHDOG.unwatch(token)
    assert time.monotonic() - started < 3
    conn.interrupt()  # what a deadline passing just after a query finished does
    assert conn.execute("SELECT count(*) FROM item").fetchall() == [(4,)]


def test_threads_give_the_same_verdicts(tiny_bird):
    questions = load_dataset("bird", tiny_bird) * 5
    preds = {"10": "SELECT name FROM item WHERE kind = 'fruit'", "11": "SELECT kind FROM item", "12": "SELECT nope"}
    one = score_predictions("bird", questions, preds, threads=1)
    two = score_predictions("bird", questions, preds, threads=3)
    assert one[0] == two[0] and [s.match for s in one[1]] == [s.match for s in two[1]]


def test_the_value_cap_is_the_settings_default():
    from reflect_sql.settings import Settings

    assert metrics._MAX_VALUE_BYTES == Settings.model_fields["max_value_bytes"].default


ML_LIBRARIES = ("torch", "dspy", "sentence_transformers", "transformers", "chromadb", "pandas", "mlflow", "litellm",
                "optuna")
START_UP_LIBRARIES = ("sqlglot", "pydantic", "yaml")


def _modules_after(code: str, *argv: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def _score_argv(benchmarks_dir: Path) -> list[str]:
    bird = benchmarks_dir / "bird"
    return ["score", "--dataset", "bird", "--questions", str(bird / "dev.json"), "--db-root",
            str(bird / "dev_databases"), "--gold-as-predictions", "--limit", "5", "--json"]


def test_bird_scoring_imports_neither_sqlglot_nor_pydantic(benchmarks_dir):
    code = ("import sys\nfrom reflect_sql.experiments.datasets import load_questions\n"
            "from reflect_sql.experiments.scoring import score_predictions\n"
            "qs = load_questions('bird', sys.argv[1], sys.argv[2], limit=5)\n"
            "assert score_predictions('bird', qs, {q.key: q.gold_sql for q in qs})[0]['overall'] == 100.0")
    loaded = _modules_after(code, str(benchmarks_dir / "bird" / "dev.json"), str(benchmarks_dir / "bird" / "dev_databases"))
    assert loaded.isdisjoint(ML_LIBRARIES + ("sqlglot", "pydantic"))


def test_score_command_imports_no_ml_library(benchmarks_dir):
    loaded = _modules_after("import sys\nfrom reflect_sql.cli import main\nassert main(sys.argv[1:]) == 0",
                            *_score_argv(benchmarks_dir))
    assert loaded.isdisjoint(ML_LIBRARIES)


def test_score_command_imports_no_sql_parser_settings_or_yaml(benchmarks_dir):
    loaded = _modules_after("import sys\nfrom reflect_sql.cli import main\nassert main(sys.argv[1:]) == 0",
                            *_score_argv(benchmarks_dir))
    assert loaded.isdisjoint(START_UP_LIBRARIES)


@pytest.mark.slow
def test_score_speed_bench_json(benchmarks_dir):
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "score_speed.py"), "--runs", "1", "--json",
                           "--root", str(benchmarks_dir)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdicts_agree"] and result["questions"] == 287 and result["deliberately_wrong"] == 287 // 7
    assert result["overall_ex"]["ours"] == result["overall_ex"]["official"] < 100
    assert result["ratio"]["wall"] > 0 and result["ratio"]["cpu"] > 0
