"""Fixtures of the experiments tests: a tiny hand-made BIRD-layout dataset (``benchmarks_dir`` is shared)."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

@pytest.fixture()
def tiny_bird(tmp_path: Path) -> Path:
    """A BIRD-layout dataset with one database whose rows make order/duplicate cases visible."""
    db_dir = tmp_path / "dev_databases" / "shop"
    (db_dir / "database_description").mkdir(parents=True)
    (db_dir / "database_description" / "item.csv").write_text("original_column_name,column_description\nid,key\n")
    conn = sqlite3.connect(db_dir / "shop.sqlite")
    conn.executescript(
        """
        CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price REAL, kind TEXT);
        INSERT INTO item VALUES (1, 'apple', 1.5, 'fruit'), (2, 'pear', 2.0, 'fruit'),
                                (3, 'leek', 0.5, 'veg'), (4, 'kale', 3.0, 'veg');
        """
    )
    conn.commit()
    conn.close()
    questions = [
        {"question_id": 10, "db_id": "shop", "question": "names of fruit", "evidence": "fruit refers to kind = 'fruit'",
         "SQL": "SELECT name FROM item WHERE kind = 'fruit'", "difficulty": "simple"},
        {"question_id": 11, "db_id": "shop", "question": "kinds", "evidence": "",
         "SQL": "SELECT DISTINCT kind FROM item", "difficulty": "moderate"},
        {"question_id": 12, "db_id": "shop", "question": "cheapest first", "evidence": "",
         "SQL": "SELECT name FROM item ORDER BY price", "difficulty": "challenging"},
    ]
    (tmp_path / "dev.json").write_text(json.dumps(questions))
    (tmp_path / "dev_tables.json").write_text(json.dumps([{"db_id": "shop"}]))
    return tmp_path
