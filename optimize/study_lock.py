"""One ``tune`` process per sqlite study: a file lock beside the study's database.

SQLite serialises writers with a file lock of its own that waits and times out under concurrent
trials, and a sqlite file is on one machine anyway: a study meant for several workers lives in a
server database (``--storage postgresql://...``), where Optuna's row locks and trial heartbeats
keep the workers apart and no lock of ours is taken.
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from reflect_sql.errors import UserError


def sqlite_storage_file(storage: str) -> Path | None:
    """The database file of a sqlite storage URL, resolved (``?timeout=30`` names the same file);
    None for a server storage."""
    if not storage.startswith("sqlite:///"):
        return None
    return Path(storage[len("sqlite:///"):].split("?", 1)[0]).resolve()


def study_lock_path(storage: str, name: str) -> Path | None:
    """Beside a sqlite study's database, so that every process on that file meets the same lock,
    whatever its --out; None for a server storage."""
    db = sqlite_storage_file(storage)
    if db is None:
        return None
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return db.parent / f"{db.name}.{safe}.lock"


@contextmanager
def study_lock(storage: str, name: str) -> Iterator[None]:
    """Hold the sqlite study's lock, or refuse at once naming the holder; nothing for a server storage."""
    path = study_lock_path(storage, name)
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise UserError(f"study {name!r} in {storage} is being tuned by another process (pid {holder}); "
                            "a sqlite study takes one process at a time: wait for it, or stop it and rerun to "
                            "resume (several workers need a server storage: --storage postgresql://...)") from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)
