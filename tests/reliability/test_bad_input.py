"""Bad input to the CLI: one clear line on stderr and exit code 2, never a traceback.

Every case runs ``python -m reflect_sql`` in a subprocess, as a user would (argv bytes included);
the cases run a few at a time, since each pays the interpreter's start-up.
"""
from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

import reliability_cases as cases


@dataclass
class Case:
    name: str
    argv: list  # str or bytes items
    expect: str  # a phrase the message must contain


def _cases(tmp: Path, db: str, kb_dir: Path) -> list[Case]:
    good_root = cases.write_dataset(tmp / "good", {"shop": Path(db)}, [("q0", "shop", "How many orders?", cases.BENIGN)])

    def dataset(name: str, text: str | bytes) -> Path:
        root = tmp / name
        root.mkdir()
        (root / "dev_databases").symlink_to(good_root / "dev_databases", target_is_directory=True)
        (root / "dev.json").write_bytes(text if isinstance(text, bytes) else text.encode())
        return root

    def eval_config(name: str, body: str) -> str:
        path = tmp / f"{name}.yaml"
        path.write_text(body)
        return str(path)

    def yaml(name: str, body: str | bytes) -> str:
        path = tmp / f"{name}.yaml"
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
        return str(path)

    good = (tmp / "good" / "dev.json").read_text()
    ds = lambda root, extra="": f"dataset: {{format: bird, root: {root}}}\nmlflow: {{enabled: false}}\n{extra}"  # noqa: E731
    descriptions = tmp / "desc-utf16"
    descriptions.mkdir()
    (descriptions / "orders.csv").write_bytes("original_column_name,column_description\nstatus,état\n".encode("utf-16"))
    binary = tmp / "desc-binary"
    binary.mkdir()
    (binary / "orders.csv").write_bytes(bytes(range(256)) * 4)
    not_a_db = tmp / "notes.txt"
    not_a_db.write_text("this is not a database\n")
    ask = ["ask", "--db", db]
    evaluate = lambda config: ["eval", config, "--out", str(tmp / "never"), "--no-mlflow", "--no-progress"]  # noqa: E731
    return [
        # questions
        Case("empty question", ask + ["--", ""], "question is empty"),
        Case("blank question", ask + ["--", "   \n\t "], "question is empty"),
        Case("100 KB question", ask + ["--", "How many orders? " * 6000], "characters long"),
        Case("non-UTF-8 question bytes", [b"ask", b"--db", db.encode(), b"--", b"How many \xff\xfe orders \xc3("], "not UTF-8"),
        Case("non-UTF-8 evidence bytes", [b"ask", b"--db", db.encode(), b"--evidence", b"\x80\x81", b"--", b"How many orders?"], "not UTF-8"),
        # databases
        Case("missing database file", ["ask", "--db", str(tmp / "nope.sqlite"), "--", "How many orders?"], "does not exist"),
        Case("a text file as database", ["ask", "--db", str(not_a_db), "--", "How many orders?"], "not a readable SQLite database"),
        Case("unknown db_id in the config", evaluate(eval_config("dbids", ds(good_root).replace("root:", "db_ids: [nope], root:"))), "unknown db_id"),
        Case("unknown db_id in --set", evaluate(eval_config("plain", ds(good_root))) + ["--set", "dataset.db_ids=nope"], "unknown db_id"),
        Case("unknown db_id in kb build", ["kb", "build", "--db", db, "--kb-dir", str(kb_dir), "--tables-json",
                                           str(_tables_json(tmp)), "--db-id", "nope"], "db_id 'nope'"),
        # datasets
        Case("malformed dataset JSON", evaluate(eval_config("malformed", ds(dataset("malformed", "[{not json")))), "not valid JSON"),
        Case("truncated dataset JSON", evaluate(eval_config("truncated", ds(dataset("truncated", good[: len(good) // 2])))), "not valid JSON"),
        Case("dataset not a list", evaluate(eval_config("notlist", ds(dataset("notlist", json.dumps({"q": 1}))))), "expected a JSON list"),
        Case("dataset entry lacks a question", evaluate(eval_config("noquestion", ds(dataset(
            "noquestion", json.dumps([{"question_id": 1, "db_id": "shop", "SQL": "SELECT 1"}]))))), "no usable 'question'"),
        Case("dataset in Latin-1", evaluate(eval_config("latin1", ds(dataset("latin1", good.replace("orders", "ordérs").encode("latin-1"))))), "not UTF-8"),
        # description CSVs
        Case("description CSV in UTF-16", ["kb", "build", "--db", db, "--kb-dir", str(kb_dir), "--descriptions", str(descriptions)],
             "not a BIRD description CSV"),
        Case("description CSV of binary bytes", ["kb", "build", "--db", db, "--kb-dir", str(kb_dir), "--descriptions", str(binary)],
             "not a BIRD description CSV"),
        # settings and configs
        Case("unknown setting in YAML", ask + ["--config", yaml("unknown", "thetta_r: 5\n"), "--", "q?"], "thetta_r"),
        Case("out-of-range threshold", ask + ["--config", yaml("range", "theta_e: 9\n"), "--", "q?"], "theta_e"),
        Case("negative cap", ask + ["--config", yaml("negative", "max_syntax_repairs: -1\n"), "--", "q?"], "max_syntax_repairs"),
        Case("weights not summing to 1", ask + ["--config", yaml("weights", "w_c: 0.9\n"), "--", "q?"], "sum to 1"),
        Case("wrong type", ask + ["--config", yaml("type", "k_tables: many\n"), "--", "q?"], "k_tables"),
        Case("YAML not a mapping", ask + ["--config", yaml("list", "- a\n- b\n"), "--", "q?"], "mapping"),
        Case("YAML syntax error", ask + ["--config", yaml("syntax", "theta_r: [5\n"), "--", "q?"], "not valid YAML"),
        Case("YAML in Latin-1", ask + ["--config", yaml("latin", "lm: 'mod\xe8le'\n".encode("latin-1")), "--", "q?"], "not UTF-8"),
        Case("missing config file", ask + ["--config", str(tmp / "absent.yaml"), "--", "q?"], "not found"),
        Case("out-of-range --set", ask + ["--set", "alpha=2", "--", "q?"], "alpha"),
        Case("--set without =", ask + ["--set", "alpha", "--", "q?"], "key=value"),
        Case("unknown key in an eval config", evaluate(eval_config("evalunknown", ds(good_root, "threds: 2\n"))), "unknown key"),
        Case("zero threads in an eval config", evaluate(eval_config("threads", ds(good_root, "threads: 0\n"))), "threads"),
        Case("out-of-range setting in an eval config", evaluate(eval_config("evalrange", ds(good_root, "settings: {theta_r: 11}\n"))),
             "theta_r"),
        Case("YAML syntax error in an eval config", evaluate(eval_config("evalsyntax", "dataset: {format: bird\n")), "not valid YAML"),
        Case("eval config in Latin-1", evaluate(yaml("evallatin", (ds(good_root) + "# caf\xe9\n").encode("latin-1"))), "not UTF-8"),
        Case("ablation set in Latin-1", ["ablate", yaml("ablatelatin", "variants: [a.yaml]\n# caf\xe9\n".encode("latin-1"))],
             "not UTF-8"),
        Case("tuning config in Latin-1", ["tune", yaml("tunelatin", "experiment: a.yaml\n# caf\xe9\n".encode("latin-1"))],
             "not UTF-8"),
        Case("glossary in Latin-1", ["kb", "build", "--db", db, "--kb-dir", str(kb_dir), "--glossary",
                                     yaml("glossarylatin", "terms: {caf\xe9: a drink}\n".encode("latin-1"))], "not UTF-8"),
        Case("ablation set without variants", ["ablate", yaml("novariants", "name: x\n")], "variants"),
        Case("unknown dataset format", evaluate(eval_config("format", ds(good_root).replace("bird", "wikisql"))), "format"),
    ]


def _tables_json(tmp: Path) -> Path:
    path = tmp / "tables.json"
    path.write_text(json.dumps([{"db_id": "shop", "table_names_original": ["orders"], "column_names_original": [[-1, "*"]]}]))
    return path


def _run(case: Case) -> tuple[Case, subprocess.CompletedProcess]:
    return case, subprocess.run([sys.executable, "-m", "reflect_sql", *case.argv], capture_output=True, timeout=180)


@pytest.mark.slow
def test_bad_input_gets_one_clear_line_and_exit_2(shop_db, tmp_path, ledger):
    before = cases.sqlite_fingerprint(shop_db)
    todo = _cases(tmp_path, str(shop_db), tmp_path / "kb")
    problems = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        for case, proc in pool.map(_run, todo):
            err = proc.stderr.decode("utf-8", "replace").strip()
            lines = err.splitlines()
            ok = (proc.returncode == 2 and "Traceback" not in err and len(lines) == 1
                  and lines[0].startswith("reflect-sql: error:") and case.expect.lower() in err.lower())
            if not ok:
                problems.append(f"{case.name}: exit {proc.returncode}, stderr {err[-500:]!r}")
            else:
                ledger.case("cli", "bad-input", "-", "refused")
    assert not problems, "\n".join(problems)
    assert not (tmp_path / "never").exists() or not (tmp_path / "never" / "results.jsonl").exists()
    assert not (tmp_path / "kb" / "kb.json").exists(), "a refused build wrote a KB"
    assert cases.sqlite_fingerprint(shop_db) == before
