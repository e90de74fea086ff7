"""A KB directory on disk: the current document, one immutable snapshot per version, a change log.

Layout::

    DIR/kb.json            the current version (what retrieval reads)
    DIR/versions/vNNNN.json every version ever committed, never rewritten
    DIR/log.jsonl          append-only: one line per version (action, time, provenance, changes)

A rollback does not rewind the counter: it commits a new version whose content equals the old
one, so the log keeps the whole story and a rollback can itself be rolled back.
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from reflect_sql.errors import UserError
from reflect_sql.files import atomic_file
from reflect_sql.kb.model import KnowledgeBase


def _dump(kb: KnowledgeBase) -> str:
    return json.dumps(kb.to_dict(), indent=1, ensure_ascii=False, default=str) + "\n"


class KBDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    @property
    def current_file(self) -> Path:
        return self.path / "kb.json"

    @property
    def log_file(self) -> Path:
        return self.path / "log.jsonl"

    def snapshot_file(self, version: int) -> Path:
        return self.path / "versions" / f"v{version:04d}.json"

    def exists(self) -> bool:
        return self.current_file.is_file()

    @contextmanager
    def locked(self):
        """Hold the KB's change lock: a change reads the current version, commits the next one and
        resyncs the indexes as one step, or two concurrent changes would commit the same version
        number and one would be lost. flock on a freshly opened file excludes other threads of this
        process as well as other processes."""
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield self
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def load(self) -> KnowledgeBase:
        if not self.exists():
            raise UserError(f"no knowledge base in {self.path} (build one with `reflect-sql kb build`)")
        return self._read(self.current_file)

    def _read(self, path: Path) -> KnowledgeBase:
        try:
            return KnowledgeBase.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise UserError(f"knowledge base file {path} is damaged: {exc}") from None

    def snapshot(self, version: int) -> KnowledgeBase:
        path = self.snapshot_file(version)
        if not path.is_file():
            known = ", ".join(str(e["version"]) for e in self.history()) or "none"
            raise UserError(f"{self.path} has no version {version} (versions: {known})")
        return self._read(path)

    def history(self) -> list[dict[str, Any]]:
        if not self.log_file.is_file():
            return []
        entries = []
        for line in self.log_file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entries.append(json.loads(line))
        return entries

    def latest_version(self) -> int:
        history = self.history()
        return history[-1]["version"] if history else 0

    def commit(self, kb: KnowledgeBase, action: str, summary: str, provenance: dict[str, Any] | None = None,
               changes: list[dict[str, Any]] | None = None) -> int:
        """Write ``kb`` as the next version and log why; returns the new version number."""
        parent = self.latest_version()
        kb.version = parent + 1
        text = _dump(kb)
        # Snapshot first: a crash between the two leaves an unused snapshot, never a current
        # version that history cannot explain.
        with atomic_file(self.snapshot_file(kb.version)) as tmp:
            tmp.write_text(text, encoding="utf-8")
        entry = {
            "version": kb.version,
            "parent": parent or None,
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "action": action,
            "summary": summary,
            "content_hash": kb.content_hash(),
            "provenance": provenance or {},
            "changes": changes or [],
        }
        self.path.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
        with atomic_file(self.current_file) as tmp:
            tmp.write_text(text, encoding="utf-8")
        return kb.version

    def rollback(self, version: int) -> KnowledgeBase:
        """Make the content of ``version`` current again, as a new version."""
        old = self.snapshot(version)
        current = self.load()
        if old.content() == current.content():
            raise UserError(f"the content of version {version} is already current (version {current.version})")
        self.commit(old, "rollback", f"content of version {version} restored (was version {current.version})",
                    provenance={"rolled_back_to": version, "replaced": current.version})
        return old
