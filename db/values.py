"""Turning database values into JSON-safe ones, for ``--json`` output and for schema samples."""
from __future__ import annotations

import datetime as _dt
import decimal
import math
import uuid
from typing import Any

SAMPLE_TEXT_CHARS = 80


def json_value(value: Any) -> Any:
    """A JSON-serialisable stand-in for a value an engine returned (``json.dumps(default=...)``)."""
    if isinstance(value, decimal.Decimal):
        as_float = float(value)
        # Integral decimals (COUNT over numeric, SUM of integers in PG) read better as ints.
        if value == value.to_integral_value() and math.isfinite(as_float) and abs(value) < 2**53:
            return int(value)
        return as_float if math.isfinite(as_float) else str(value)
    if isinstance(value, (_dt.date, _dt.datetime, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def sample_value(value: Any) -> Any | None:
    """A short JSON-safe sample for prompts, or None when the value is not worth showing (binary)."""
    if value is None or isinstance(value, (bytes, bytearray, memoryview)):
        return None
    if isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if not isinstance(value, str):
        value = json_value(value)
        if not isinstance(value, str):
            return value
    if len(value) > SAMPLE_TEXT_CHARS:
        return value[: SAMPLE_TEXT_CHARS - 1] + "…"
    return value
