"""``reflect-sql score``: 100% with gold as predictions, hand-made wrong predictions, bad input."""
from __future__ import annotations

import json

import pytest

from reflect_sql.cli import main
from reflect_sql.experiments.datasets import load_dataset
from reflect_sql.experiments.predictions import BIRD_SEPARATOR, read_predictions, write_bird_predictions


def _score(capsys, *argv):
    code = main(["score", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_gold_as_predictions_bird_is_100_percent(benchmarks_dir, capsys):
    b = benchmarks_dir / "bird"
    code, out, _ = _score(capsys, "--dataset", "bird", "--questions", b / "dev.json", "--db-root", b / "dev_databases",
                          "--gold-as-predictions", "--json")
    assert code == 0
    assert json.loads(out) == {"simple": 100.0, "moderate": 100.0, "challenging": 100.0, "overall": 100.0,
                               "counts": {"simple": 182, "moderate": 81, "challenging": 24, "overall": 287}}


def test_gold_as_predictions_spider_is_100_percent(benchmarks_dir, capsys):
    s = benchmarks_dir / "spider"
    code, out, _ = _score(capsys, "--dataset", "spider", "--questions", s / "dev.json", "--db-root", s / "database",
                          "--gold-as-predictions", "--json")
    assert code == 0
    assert json.loads(out) == {"overall": 100.0, "counts": {"overall": 594}}


def test_bird_format_round_trip_and_hand_made_wrong_predictions(tiny_bird, tmp_path, capsys):
    questions = load_dataset("bird", tiny_bird)
    preds = {
        "10": "SELECT name FROM item WHERE kind = 'fruit' ORDER BY name DESC",  # right, other order
        "11": "SELECT kind FROM item",  # right for BIRD: duplicates ignored
        "12": "SELECT name FROM item WHERE price > 100",  # wrong rows
    }
    path = write_bird_predictions(tmp_path / "predict_dev.json", questions, preds)
    raw = json.loads(path.read_text())
    assert raw["0"] == preds["10"] + BIRD_SEPARATOR + "shop" and set(raw) == {"0", "1", "2"}
    assert read_predictions(path, questions) == preds
    code, out, _ = _score(capsys, "--dataset", "bird", "--questions", tiny_bird / "dev.json",
                          "--db-root", tiny_bird / "dev_databases", "--predictions", path, "--json")
    assert code == 0
    assert json.loads(out) == {"simple": 100.0, "moderate": 100.0, "challenging": 0.0, "overall": 66.67,
                               "counts": {"simple": 1, "moderate": 1, "challenging": 1, "overall": 3}}


def test_spider_counts_duplicates_and_order_by(tiny_bird, tmp_path, capsys):
    bird = json.loads((tiny_bird / "dev.json").read_text())
    (tmp_path / "spider.json").write_text(json.dumps([{"db_id": q["db_id"], "question": q["question"], "query": q["SQL"]} for q in bird]))
    preds = tmp_path / "preds.json"
    preds.write_text(json.dumps({
        "0": "SELECT name FROM item WHERE kind = 'fruit' ORDER BY name DESC",  # right: gold has no ORDER BY
        "1": "SELECT kind FROM item",  # right: DISTINCT is removed from the gold; wrong with --keep-distinct
        "2": "SELECT name FROM item ORDER BY price DESC",  # wrong: gold orders by price ascending
    }))
    args = ("--dataset", "spider", "--questions", tmp_path / "spider.json", "--db-root", tiny_bird / "dev_databases",
            "--predictions", preds, "--json")
    code, out, _ = _score(capsys, *args)
    assert code == 0 and json.loads(out) == {"overall": 66.67, "counts": {"overall": 3}}
    code, out, _ = _score(capsys, *args, "--keep-distinct")
    assert code == 0 and json.loads(out) == {"overall": 33.33, "counts": {"overall": 3}}


def test_plain_json_and_jsonl_predictions(tiny_bird, tmp_path, capsys):
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"10": "SELECT name FROM item WHERE kind='fruit'", "12": "SELECT 1"}))
    lines = tmp_path / "results.jsonl"
    lines.write_text('{"question_id": 11, "sql": "SELECT DISTINCT kind FROM item"}\n'
                     '{"question_id": 12, "sql": "SELECT name FROM item ORDER BY price DESC"}\n')
    for path, overall in ((plain, 33.33), (lines, 66.67)):
        code, out, err = _score(capsys, "--dataset", "bird", "--questions", tiny_bird / "dev.json",
                                "--db-root", tiny_bird / "dev_databases", "--predictions", path, "--json")
        assert code == 0 and json.loads(out)["overall"] == overall
        assert "1 question(s) had no prediction" in err


def test_bird_format_with_wrong_database_is_refused(tiny_bird, tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"0": "SELECT 1" + BIRD_SEPARATOR + "other_db"}))
    code, _, err = _score(capsys, "--dataset", "bird", "--questions", tiny_bird / "dev.json",
                          "--db-root", tiny_bird / "dev_databases", "--predictions", path)
    assert code == 2 and "other_db" in err and "positions" in err


@pytest.mark.parametrize("content, message", [("{oops", "neither JSON nor JSONL"), ('{"999": "SELECT 1"}', "none of its keys")])
def test_malformed_predictions_exit_2(tiny_bird, tmp_path, capsys, content, message):
    path = tmp_path / "p.json"
    path.write_text(content)
    code, out, err = _score(capsys, "--dataset", "bird", "--questions", tiny_bird / "dev.json",
                            "--db-root", tiny_bird / "dev_databases", "--predictions", path)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_malformed_dataset_and_missing_db_exit_2_naming_the_file(tiny_bird, tmp_path, capsys):
    bad = tmp_path / "dev_bad.json"
    bad.write_text('[{"db_id": "shop"')
    code, _, err = _score(capsys, "--dataset", "bird", "--questions", bad, "--db-root", tiny_bird / "dev_databases",
                          "--gold-as-predictions")
    assert code == 2 and "dev_bad.json" in err and "not valid JSON" in err
    code, _, err = _score(capsys, "--dataset", "bird", "--questions", tiny_bird / "dev.json", "--db-root", tmp_path / "nowhere",
                          "--gold-as-predictions")
    assert code == 2 and "nowhere/shop/shop.sqlite" in err
