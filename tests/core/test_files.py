"""The shared readers behind every input file: each problem is one UserError naming the file; and the
one atomic writer."""
import json
import os
import stat

import pytest

from reflect_sql import files
from reflect_sql.errors import UserError
from reflect_sql.files import atomic_file, read_json_file, read_text_file, read_yaml_mapping


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


def test_atomic_file_replaces_the_file_whole_from_a_temporary_file_beside_it(tmp_path):
    path = tmp_path / "deep" / "er" / "run.json"  # the parent is created
    with atomic_file(path) as tmp:
        assert tmp.parent == path.parent and tmp.name.startswith(".run.json.") and tmp.name.endswith(".tmp")
        assert tmp.exists() and not path.exists()
        tmp.write_text("one", encoding="utf-8")
    assert path.read_text(encoding="utf-8") == "one"
    with atomic_file(path) as tmp:
        tmp.write_text("two", encoding="utf-8")
        assert path.read_text(encoding="utf-8") == "one"  # a reader sees the old file until the rename
    assert path.read_text(encoding="utf-8") == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["run.json"]


def test_atomic_file_is_readable_by_others_whatever_mkstemp_made_it(tmp_path):
    path = tmp_path / "kb.json"
    with atomic_file(path) as tmp:
        assert stat.S_IMODE(tmp.stat().st_mode) == 0o600
        tmp.write_text("{}", encoding="utf-8")
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    with atomic_file(path, mode=0o600) as tmp:
        tmp.write_text("{}", encoding="utf-8")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failure_mid_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="checksum"):
        with atomic_file(path, suffix=".partial") as tmp:
            with open(tmp, "wb") as out:
                out.write(b"half of the n")
            raise RuntimeError("checksum mismatch")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_an_interrupt_mid_write_cleans_up_too(tmp_path):
    path = tmp_path / "log.jsonl"
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(path) as tmp:
            tmp.write_text("partial", encoding="utf-8")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_a_failed_rename_leaves_no_temporary_file(tmp_path, monkeypatch):
    path = tmp_path / "run.json"
    path.write_text("old", encoding="utf-8")

    def refuse(src, dst):
        raise OSError("disk full")
    monkeypatch.setattr(files.os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        with atomic_file(path) as tmp:
            tmp.write_text("new", encoding="utf-8")
    assert path.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


@pytest.mark.parametrize("durable", [False, True])
def test_fsync_only_when_asked_and_before_the_rename(tmp_path, monkeypatch, durable):
    path = tmp_path / "results.jsonl"
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(files.os, "fsync", lambda fd: events.append("fsync") or real_fsync(fd))
    monkeypatch.setattr(files.os, "replace", lambda a, b: events.append("replace") or real_replace(a, b))
    with atomic_file(path, fsync=durable) as tmp:
        tmp.write_text("line\n", encoding="utf-8")
    assert events == (["fsync", "replace"] if durable else ["replace"])
    assert path.read_text(encoding="utf-8") == "line\n"
