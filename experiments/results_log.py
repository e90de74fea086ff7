"""The per-question results file of a run: append-only JSONL that survives being killed.

Each finished question is one line, written whole, flushed and fsynced before the next one, so a
kill loses at most the line being written. On reopening, a truncated last line is cut off (the
question reruns), and a question found twice keeps its first line, so nothing is lost or doubled.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

from reflect_sql.errors import UserError
from reflect_sql.files import atomic_file


class ResultsLog:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        self.dropped_partial = False
        self._recover()
        self._fh = open(self.path, "a", encoding="utf-8")

    def _recover(self) -> None:
        if not self.path.exists():
            return
        raw = self.path.read_bytes()
        self.records, keep = parse_records(raw, self.path)
        self.dropped_partial = bool(raw[keep:].strip())
        if keep < len(raw):
            with open(self.path, "r+b") as fh:
                fh.truncate(keep)
        if keep and not raw[:keep].endswith(b"\n"):
            # A whole record whose newline the kill cut off: keep it, and end it.
            with open(self.path, "ab") as fh:
                fh.write(b"\n")

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def append(self, record: dict[str, Any]) -> None:
        key = str(record["question_id"])
        if key in self.records:
            return
        line = json.dumps(record, ensure_ascii=False, sort_keys=False)
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.records[key] = record

    def rewrite_without(self, keys: set[str]) -> None:
        """Drop some records (e.g. errored ones to retry), atomically."""
        self._fh.close()
        for key in keys:
            self.records.pop(key, None)
        with atomic_file(self.path, fsync=True) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            for record in self.records.values():
                fh.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._fh = open(self.path, "a", encoding="utf-8")

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "ResultsLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def parse_records(raw: bytes, path: Path) -> tuple[dict[str, dict[str, Any]], int]:
    """The records of a results file's bytes, by question (a question found twice keeps its first
    line), and the length of the part that holds whole records. Only the last line may be cut (a
    kill while writing, even inside a multibyte character); a corrupt line before it is an error."""
    records: dict[str, dict[str, Any]] = {}
    keep = offset = 0
    for n, line in enumerate(raw.splitlines(keepends=True), 1):
        offset += len(line)
        if line.strip():
            try:
                record = json.loads(line)
                key = str(record["question_id"])
            except (ValueError, KeyError, TypeError):
                if raw[offset:].strip():
                    raise UserError(f"{path}: line {n} is corrupt (and not the last line a kill "
                                    "could have cut); repair or remove the file") from None
                break
            records.setdefault(key, record)
        keep = offset
    return records, keep


def read_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The finished records of an eval output directory, for reports: read only, so a run still
    writing is not touched (its cut last line, if any, is left out)."""
    results = Path(run_dir) / "results.jsonl"
    if not results.is_file():
        raise UserError(f"{run_dir} is not an eval output directory (no results.jsonl)")
    return list(parse_records(results.read_bytes(), results)[0].values())


def read_run(run_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """An eval output directory's ``run.json`` and its finished records (``read_records``)."""
    meta = Path(run_dir) / "run.json"
    if not meta.is_file():
        raise UserError(f"{run_dir} is not an eval output directory (no run.json)")
    return json.loads(meta.read_text(encoding="utf-8")), read_records(run_dir)


def report_command(name: str, doc: str, report: Callable[[list[Path]], str], argv: list[str] | None) -> int:
    """``python -m`` entry of a report over eval runs: prints ``report(runs)``; a bad run dir is a one-line error (exit 2)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="eval output directories")
    args = parser.parse_args(argv)
    try:
        print(report(args.runs))
    except UserError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
    return 0
