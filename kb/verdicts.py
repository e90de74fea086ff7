"""A person's verdicts on answers (the chat's "correct" / "wrong"), kept beside the KB they concern.

``DIR/verdicts.jsonl`` is append-only: every verdict is recorded, whether or not it taught the KB.
A "wrong" verdict never enriches; it is the record a developer reads to see where answers failed.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from reflect_sql.kb.versions import KBDir

VERDICTS_FILE = "verdicts.jsonl"
VERDICTS = ("correct", "wrong")


def record_verdict(kb_dir: str | Path, verdict: str, question: str, sql: str | None, **detail: Any) -> dict[str, Any]:
    """Append one verdict with ``detail`` (the answer, the KB's outcome); returns the entry."""
    if verdict not in VERDICTS:
        raise ValueError(f"a verdict is one of {', '.join(VERDICTS)}, not {verdict!r}")
    entry = {"time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "verdict": verdict,
             "question": question, "sql": sql, **detail}
    with KBDir(kb_dir).locked() as directory:
        with (directory.path / VERDICTS_FILE).open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry, ensure_ascii=False, default=str) + "\n")
    return entry


def verdicts(kb_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(kb_dir) / VERDICTS_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
