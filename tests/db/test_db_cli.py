"""``reflect-sql db schema`` and ``reflect-sql db sql`` as a user runs them: a separate process."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "reflect_sql", *args], capture_output=True, text=True,
                          timeout=120, env=env)


@pytest.fixture(scope="module")
def superhero(benchmarks_dir) -> Path:
    return benchmarks_dir / "bird" / "dev_databases" / "superhero" / "superhero.sqlite"


def test_the_exact_form_prints_the_count(superhero):
    done = cli("db", "sql", "--db", str(superhero), "SELECT count(*) FROM superhero", "--json")
    assert done.returncode == 0, done.stderr
    expected = sqlite3.connect(superhero.as_uri() + "?mode=ro", uri=True).execute("SELECT count(*) FROM superhero").fetchone()[0]
    assert json.loads(done.stdout) == {"columns": ["count(*)"], "rows": [[expected]]}


def test_human_output_and_row_limit(superhero):
    done = cli("db", "sql", "--db", str(superhero), "SELECT id, superhero_name FROM superhero ORDER BY id",
               "--max-rows", "2")
    assert done.returncode == 0, done.stderr
    assert "superhero_name" in done.stdout and "3-D Man" in done.stdout and "A-Bomb" in done.stdout
    assert "Abe Sapien" not in done.stdout
    assert "truncated" in done.stderr


@pytest.mark.parametrize("sql", ["DROP TABLE superhero", "SELECT 1; DELETE FROM superhero", "VACUUM"])
def test_refusal_exits_2_with_one_line(superhero, sql):
    done = cli("db", "sql", "--db", str(superhero), sql)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refused" in lines[0], done.stderr


def test_timeout_flag(superhero):
    done = cli("db", "sql", "--db", str(superhero), "SELECT count(*) FROM hero_power a, hero_power b, hero_power c",
               "--timeout", "0.5")
    assert done.returncode == 2 and "timeout" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_missing_database_exits_2_and_creates_nothing(tmp_path):
    missing = tmp_path / "missing.sqlite"
    done = cli("db", "sql", "--db", str(missing), "SELECT 1")
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and str(missing) in done.stderr
    assert not missing.exists()
    done = cli("db", "schema", "--db", str(missing))
    assert done.returncode == 2 and not missing.exists()


def test_schema_json_and_table(superhero):
    done = cli("db", "schema", "--db", str(superhero), "--json")
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    assert schema["dialect"] == "sqlite"
    assert {t["name"] for t in schema["tables"]} >= {"superhero", "hero_power", "colour"}
    done = cli("db", "schema", "--db", str(superhero))
    assert done.returncode == 0 and "publisher_name" in done.stdout and "-> publisher.id" in done.stdout


@pytest.mark.postgres
def test_postgres_url_and_one_line_multiline_errors(bird_pg):
    url = bird_pg["superhero"]
    done = cli("db", "sql", "--db", url, "SELECT avg(height_cm)::numeric(10,2) AS h, count(*) FROM superhero", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["columns"] == ["h", "count"] and data["rows"][0][1] == 750
    assert isinstance(data["rows"][0][0], float)  # Decimal printed as a number
    done = cli("db", "sql", "--db", url, "SELECT nope FROM superhero")
    # PostgreSQL's own message spans three lines (LINE 1 and a caret); the CLI prints one.
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        'reflect-sql: error: syntax: column "nope" does not exist']
