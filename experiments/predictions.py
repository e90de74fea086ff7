"""Predictions files: the official BIRD format out, and the usual shapes in.

Official BIRD format (``predict_dev.json`` of the BIRD evaluator)::

    {"<index>": "<SQL>\\t----- bird -----\\t<db_id>", ...}

where ``<index>`` is the question's position in the questions file; the official script pairs
entries with the gold file by that order, so ``reflect-sql eval`` writes every selected question.

Accepted on input (``read_predictions``), all resolved to ``{question.key: sql}``:
- the official BIRD format above (keys are positions; the db_id must agree with the question's);
- a plain JSON object ``{question_id: sql}`` (Spider: the position, as it has no question_id);
- a JSON list or JSONL of objects with ``question_id`` (or ``index``) and ``sql`` (or ``SQL``,
  ``predicted_sql``), which includes the ``results.jsonl`` that ``reflect-sql eval`` writes.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from reflect_sql.errors import UserError
from reflect_sql.files import read_json_file
from reflect_sql.experiments.datasets import Question

BIRD_SEPARATOR = "\t----- bird -----\t"
_SQL_FIELDS = ("sql", "SQL", "predicted_sql", "pred")


def to_bird_format(questions: Iterable[Question], sql_by_key: Mapping[str, str | None]) -> dict[str, str]:
    out = {}
    for q in questions:
        sql = sql_by_key.get(q.key) or ""
        # The official script splits on the separator and runs the SQL as one line of text.
        out[str(q.index)] = f"{sql}{BIRD_SEPARATOR}{q.db_id}"
    return out


def write_bird_predictions(path: str | Path, questions: Iterable[Question], sql_by_key: Mapping[str, str | None]) -> Path:
    path = Path(path)
    path.write_text(json.dumps(to_bird_format(questions, sql_by_key), indent=4, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _sql_of(record: Mapping[str, Any], path: Path, n: int) -> str:
    for field in _SQL_FIELDS:
        if field in record:
            value = record[field]
            if value is None:
                return ""
            if not isinstance(value, str):
                raise UserError(f"{path}: record {n} has a non-text {field!r}")
            return value
    raise UserError(f"{path}: record {n} has no SQL field (expected one of: {', '.join(_SQL_FIELDS)})")


def read_predictions(path: str | Path, questions: list[Question]) -> dict[str, str]:
    path = Path(path)
    data = read_json_file(path, "predictions file", json_lines=True)
    by_key = {q.key: q for q in questions}
    by_index = {str(q.index): q for q in questions}
    out: dict[str, str] = {}

    def put(q: Question | None, sql: str, label: str) -> None:
        if q is None:
            return  # predictions for questions outside the selection are ignored
        if q.key in out:
            raise UserError(f"{path}: two predictions for question {label}")
        out[q.key] = sql

    if isinstance(data, dict):
        bird_style = any(isinstance(v, str) and BIRD_SEPARATOR in v for v in data.values())
        for raw_key, value in data.items():
            if bird_style:
                if not isinstance(value, str) or BIRD_SEPARATOR not in value:
                    # The official evaluator treats a non-text entry as an empty prediction.
                    sql, db_id = "", None
                else:
                    sql, db_id = value.rsplit(BIRD_SEPARATOR, 1)
                q = by_index.get(str(raw_key).strip())
                if q is not None and db_id is not None and db_id.strip() != q.db_id:
                    raise UserError(
                        f"{path}: entry {raw_key} names database {db_id.strip()!r} but question {raw_key} of the "
                        f"questions file is on {q.db_id!r} (BIRD-format keys are positions in the questions file)"
                    )
                put(q, sql, str(raw_key))
            else:
                if value is not None and not isinstance(value, str):
                    raise UserError(f"{path}: prediction for {raw_key} is not text")
                put(by_key.get(str(raw_key).strip()), value or "", str(raw_key))
    elif isinstance(data, list):
        for n, record in enumerate(data, 1):
            if not isinstance(record, dict):
                raise UserError(f"{path}: record {n} is not an object")
            if "question_id" in record:
                q = by_key.get(str(record["question_id"]))
            elif "index" in record:
                q = by_index.get(str(record["index"]))
            else:
                raise UserError(f"{path}: record {n} has neither 'question_id' nor 'index'")
            put(q, _sql_of(record, path, n), str(record.get("question_id", record.get("index"))))
    else:
        raise UserError(f"{path}: expected a JSON object or a list of records, got {type(data).__name__}")
    if questions and not out:
        raise UserError(f"{path}: none of its keys match a selected question (keys are question_ids, or positions in the BIRD format)")
    return out
