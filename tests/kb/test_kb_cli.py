"""The exact ``reflect-sql kb`` command forms."""
from __future__ import annotations

import json

import pytest

from reflect_sql.cli import main
from reflect_sql.db.base import QueryResult
from reflect_sql.kb.enrich import enrich


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_kb_cli_forms(school_db, tmp_path, capsys):
    kb_dir = str(tmp_path / "kb")
    descriptions = tmp_path / "d"
    descriptions.mkdir()
    (descriptions / "course.csv").write_text(
        "original_column_name,column_name,column_description,data_format,value_description\n"
        "credits,,ECTS credits of the course,integer,\n")
    glossary = tmp_path / "g.yaml"
    glossary.write_text("aliases:\n  heat science: Thermodynamics\n")
    train = tmp_path / "train.json"
    train.write_text(json.dumps([{"question": "Titles of all courses", "SQL": "SELECT title FROM course"}]))

    code, out, _ = run(capsys, "kb", "build", "--db", str(school_db), "--kb-dir", kb_dir, "--descriptions",
                       str(descriptions), "--glossary", str(glossary), "--train", str(train))
    assert code == 0 and "version 1 (new)" in out and "1 examples" in out

    code, out, _ = run(capsys, "kb", "search", "--kb-dir", kb_dir, "Which students take heat science?", "--k", "2",
                       "--m", "2", "--json")
    data = json.loads(out)
    assert code == 0 and set(data) == {"tables", "columns", "values"}
    assert {"student", "course", "enrollment"} <= set(data["tables"])
    assert "course.title" in data["columns"] and data["values"][0]["value"] == "Thermodynamics"

    code, out, _ = run(capsys, "kb", "search", "--kb-dir", kb_dir, "How many credits has Linear Algebra?")
    assert code == 0 and "CREATE TABLE course (" in out and "ECTS credits of the course" in out

    code, out, _ = run(capsys, "kb", "show", "--kb-dir", kb_dir, "course")
    assert code == 0 and "meaning (csv): ECTS credits of the course" in out and "example (train)" in out

    enrich(kb_dir, "Titles of courses worth 6 credits", "SELECT title FROM course WHERE credits = 6",
           QueryResult(["title"], [("Thermodynamics",)]), {"entailment": True})
    code, out, _ = run(capsys, "kb", "history", "--kb-dir", kb_dir)
    assert code == 0 and "v1" in out and "build" in out and "* v2" in out and "enrich" in out
    code, out, _ = run(capsys, "kb", "history", "--kb-dir", kb_dir, "--json")
    assert [e["action"] for e in json.loads(out)] == ["build", "enrich"]

    code, out, _ = run(capsys, "kb", "rollback", "--kb-dir", kb_dir, "1")
    assert code == 0 and "version 3" in out
    code, out, _ = run(capsys, "kb", "show", "--kb-dir", kb_dir, "course", "--json")
    assert [e["source"] for e in json.loads(out)["examples"]] == ["train"]


@pytest.mark.parametrize("argv, message", [
    (["kb", "show", "--kb-dir", "{tmp}/none", "t"], "no knowledge base in"),
    (["kb", "history", "--kb-dir", "{tmp}/none"], "no knowledge base in"),
    (["kb", "build", "--db", "{tmp}/missing.sqlite", "--kb-dir", "{tmp}/kb"], "does not exist"),
    (["kb", "search", "--kb-dir", "{tmp}/none", "q"], "no knowledge base in"),
])
def test_kb_cli_errors_are_one_line(tmp_path, capsys, argv, message):
    code, out, err = run(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
