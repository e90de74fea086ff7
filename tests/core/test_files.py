"""The shared readers behind every input file: each problem is one UserError naming the file."""
import json

import pytest

from reflect_sql.errors import UserError
from reflect_sql.files import read_json_file, read_text_file, read_yaml_mapping


def test_text_with_a_bom_reads_without_it(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes("\ufeffcafé".encode("utf-8"))
    assert read_text_file(path, "notes") == "café"


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "absent.json", "notes not found: .*absent.json"),
    (lambda d: d, "is a directory, not a file"),
    (lambda d: (d / "latin.txt").write_bytes("caf\xe9".encode("latin-1")) and d / "latin.txt",
     r"latin.txt is not UTF-8 text: byte 0xe9 at position 3"),
])
def test_unreadable_files_name_themselves(tmp_path, make, message):
    with pytest.raises(UserError, match=message):
        read_text_file(make(tmp_path), "notes")


def test_the_error_class_is_the_callers(tmp_path):
    class ConfigError(Exception):
        pass
    with pytest.raises(ConfigError, match="config file not found"):
        read_yaml_mapping(tmp_path / "gone.yaml", "config file", error=ConfigError)


def test_json_is_read_and_json_lines_only_when_asked(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n', encoding="utf-8")
    assert read_json_file(path, "rows", json_lines=True) == [{"a": 1}, {"a": 2}]
    with pytest.raises(UserError, match="rows .*rows.jsonl is not valid JSON"):
        read_json_file(path, "rows")


def test_a_bad_json_line_is_named_by_number(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text('{"a": 1}\n{"a": \n', encoding="utf-8")
    with pytest.raises(UserError, match=r"neither JSON nor JSONL \(line 2: "):
        read_json_file(path, "rows", json_lines=True)


def test_a_whole_json_document_wins_over_lines(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps([{"a": 1}], indent=2), encoding="utf-8")
    assert read_json_file(path, "rows", json_lines=True) == [{"a": 1}]


@pytest.mark.parametrize("text, expected", [("", {}), ("a: 1\n", {"a": 1})])
def test_yaml_mapping(tmp_path, text, expected):
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    assert read_yaml_mapping(path, "config file") == expected


@pytest.mark.parametrize("text, message", [("- 1\n- 2\n", "must hold a mapping, not list"), ("a: [1\n", "not valid YAML")])
def test_yaml_that_is_not_a_mapping(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=message):
        read_yaml_mapping(path, "config file")
