"""Reading a run's results.jsonl for reports: read only, the same rule as resuming."""
from __future__ import annotations

import json

import pytest

from reflect_sql.errors import UserError
from reflect_sql.experiments.results_log import ResultsLog, read_records, read_run


def _line(key, **more) -> bytes:
    return (json.dumps({"question_id": key, **more}, ensure_ascii=False) + "\n").encode("utf-8")


def test_a_last_line_cut_inside_a_multibyte_character_is_left_out_and_the_file_untouched(tmp_path):
    whole = _line(1, question="Bàn 5 đã chờ bao lâu?") + _line(1, question="a second line of question 1")
    cut = _line(2, question="Món khai vị")[:-4]  # inside the three bytes of "ị": not even UTF-8
    (tmp_path / "results.jsonl").write_bytes(whole + cut)
    records = read_records(tmp_path)
    assert [r["question"] for r in records] == ["Bàn 5 đã chờ bao lâu?"]  # question 1's first line wins
    assert (tmp_path / "results.jsonl").read_bytes() == whole + cut
    # Resuming reads the same records, and only it cuts the file back to its whole lines.
    with ResultsLog(tmp_path / "results.jsonl") as log:
        assert list(log.records) == ["1"] and log.dropped_partial
    assert (tmp_path / "results.jsonl").read_bytes() == whole


def test_a_corrupt_line_before_the_last_is_an_error_not_a_smaller_count(tmp_path):
    (tmp_path / "results.jsonl").write_bytes(_line(1) + b"{not json\n" + _line(2))
    with pytest.raises(UserError, match="line 2 is corrupt"):
        read_records(tmp_path)


def test_a_directory_without_the_files_is_not_a_run(tmp_path):
    with pytest.raises(UserError, match="no results.jsonl"):
        read_records(tmp_path)
    (tmp_path / "results.jsonl").write_bytes(_line(1))
    with pytest.raises(UserError, match="no run.json"):
        read_run(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"name": "x"}))
    assert read_run(tmp_path) == ({"name": "x"}, [{"question_id": 1}])
