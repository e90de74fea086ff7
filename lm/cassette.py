"""Record/replay of LM calls, so an experiment can be re-run bit for bit offline.

A cassette is a directory with one JSON file per distinct request, named by the sha256 of the
request's normalised JSON (model, messages, generation parameters). Recording writes each file
atomically, so concurrent threads are safe; replay reads only from the directory and raises
``CassetteMiss`` (an ``LMFailure`` of kind ``miss``) naming the hash when a request is not there.
A call that failed (timeout, API error) is recorded as its failure, and replays as the same
``LMFailure``, unless an answer for the same request was recorded too.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from reflect_sql.errors import UserError
from reflect_sql.files import atomic_file
from reflect_sql.lm.failures import LMFailure

# Connection details and DSPy's execution controls do not change what the model is asked.
_IGNORED_KEYS = {"api_key", "api_base", "base_url", "headers", "extra_headers", "timeout", "num_retries", "cache"}

FORMAT = "reflect-sql-cassette-v1"


class CassetteMiss(LMFailure):
    def __init__(self, key: str, directory: Path, model: str | None = None):
        self.key = key
        self.directory = directory
        super().__init__(
            "miss",
            f"cassette {directory} has no recorded response for request {key} "
            f"(the prompt, model or parameters differ from the recorded run)",
            model=model,
        )


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, type) and hasattr(value, "model_json_schema"):  # a pydantic response_format
        return {"pydantic": value.__name__, "schema": value.model_json_schema()}
    if hasattr(value, "model_dump"):
        return _jsonable(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    return repr(value)


def normalise(payload: dict) -> dict:
    """The request as plain JSON data, without connection settings or unset (None) parameters."""
    return {k: _jsonable(v) for k, v in sorted(payload.items()) if k not in _IGNORED_KEYS and v is not None}


def request_hash(payload: dict) -> str:
    text = json.dumps(normalise(payload), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Cassette:
    def __init__(self, directory: str | os.PathLike, mode: Literal["record", "replay"]):
        if mode not in ("record", "replay"):
            raise ValueError(f"cassette mode must be 'record' or 'replay', not {mode!r}")
        self.directory = Path(directory).expanduser()
        self.mode = mode
        if mode == "replay" and not self.directory.is_dir():
            raise UserError(f"replay cassette not found: {self.directory} is not a directory")
        if mode == "record":
            self.directory.mkdir(parents=True, exist_ok=True)

    @property
    def replaying(self) -> bool:
        return self.mode == "replay"

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str, model: str | None = None) -> dict:
        try:
            entry = json.loads(self.path(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CassetteMiss(key, self.directory, model) from None
        if entry.get("format") != FORMAT:
            raise CassetteMiss(key, self.directory, model)
        return entry

    def put(self, key: str, entry: dict) -> None:
        data = json.dumps({"format": FORMAT, "hash": key, **entry}, ensure_ascii=False, indent=1, default=repr)
        with atomic_file(self.path(key)) as tmp:
            tmp.write_text(data, encoding="utf-8")

    def __len__(self) -> int:
        return sum(1 for _ in self.directory.glob("*.json"))
