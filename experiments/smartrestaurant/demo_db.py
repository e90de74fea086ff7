"""Create the SmartRestaurant demo database, or reuse it when it is already there and current."""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from reflect_sql.errors import UserError
from reflect_sql.experiments.smartrestaurant.generator import GENERATOR_VERSION, write_sqlite


@dataclass
class DemoDB:
    path: Path
    built: bool  # False when an existing, current file was reused
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)


def _stamp(path: Path) -> dict[str, str] | None:
    """The file's app_meta if it is a SmartRestaurant database, else None."""
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            meta = dict(conn.execute("SELECT key, value FROM app_meta").fetchall())
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return meta if meta.get("restaurant_name") == "Aria" and "reference_now" in meta else None


def create_demo_db(path: str | Path, seed: int = 0) -> DemoDB:
    """Generate the database into ``path``, replacing what is there (atomically)."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a directory; give the SQLite file to write")
    started = time.perf_counter()
    counts = write_sqlite(path, seed)
    return DemoDB(path, True, time.perf_counter() - started, counts)


def ensure_demo_db(path: str | Path, seed: int = 0) -> DemoDB:
    """Build the demo database at ``path`` unless a current one for ``seed`` is already there.

    A SmartRestaurant file from another seed or an older generator is rebuilt; any other file at
    that path is refused rather than overwritten.
    """
    path = Path(path)
    if path.exists():
        meta = _stamp(path) if path.is_file() else None
        if meta is None:
            raise UserError(f"{path} exists and is not a SmartRestaurant database; refusing to overwrite it")
        if meta.get("generator_seed") == str(seed) and meta.get("generator_version") == GENERATOR_VERSION:
            return DemoDB(path, False)
    return create_demo_db(path, seed)
