"""What each cached LM response cost when it was first computed.

Variants of an ablation share one DSPy response cache so that an identical call is computed once.
The variant that runs second then pays nothing for the calls it shares, and its tokens and
seconds no longer say what it costs on its own. The ledger keeps, per request (the cassette's
request hash), the usage and seconds of its first computation, in ``costs.sqlite`` beside the
DSPy cache; a call the cache serves is then accounted at that first cost as well as at zero.
"""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import NamedTuple

FILE_NAME = "costs.sqlite"


class FirstCost(NamedTuple):
    prompt_tokens: int
    completion_tokens: int
    seconds: float


class CostLedger:
    def __init__(self, directory: str | Path):
        path = Path(directory).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / FILE_NAME
        self._lock = threading.Lock()
        # One connection shared by the threads of a run; the lock orders them, sqlite's own
        # locking orders separate processes writing the same cache.
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30, isolation_level=None)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS first_cost (request TEXT PRIMARY KEY, prompt_tokens INTEGER, "
            "completion_tokens INTEGER, seconds REAL)")

    def put(self, request: str, cost: FirstCost) -> None:
        """Keep the first computation's cost: a later one is served warmer and says less."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO first_cost VALUES (?, ?, ?, ?)", (request, *cost))

    def get(self, request: str) -> FirstCost | None:
        with self._lock:
            row = self._db.execute(
                "SELECT prompt_tokens, completion_tokens, seconds FROM first_cost WHERE request = ?",
                (request,)).fetchone()
        return FirstCost(*row) if row else None
