"""The deterministic guard on an answer sentence: every number it states must be one the result
holds (or the question itself gave), so a model's sentence can never report a figure the database
did not return.

A number may appear rounded to the precision the sentence writes ("32.46" -> "32.5"), as a
percentage of a ratio when a percent sign follows ("0.25" -> "25%"), and with either thousands
separator ("12,500" or "12.500", the Vietnamese habit). The row count is a number the result
holds too ("3 stores").
"""
from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable

# Digits with optional separators and an optional sign; a following % marks a percentage.
_NUMBER = re.compile(r"(?<![\w.,])-?\d+(?:[.,]\d+)*(?:\s?%)?")


def _readings(token: str) -> set[Decimal]:
    """Every value a written number can mean: "1,234" is 1234 or 1.234; "1.234.567" only 1234567."""
    body = token.rstrip("% ").strip()
    out: set[Decimal] = set()
    for thousands, decimal in ((",", "."), (".", ",")):
        parts = body.split(decimal)
        if len(parts) > 2:
            continue
        whole = parts[0]
        groups = whole.lstrip("-").split(thousands)
        if len(groups) > 1 and not all(len(g) == 3 for g in groups[1:]):
            continue  # "1,23" is not a thousands grouping
        text = whole.replace(thousands, "") + ("." + parts[1] if len(parts) == 2 else "")
        try:
            out.add(Decimal(text))
        except InvalidOperation:
            continue
    return out


def numbers_in_text(text: str) -> list[str]:
    """The numbers a text writes, as written (with a trailing % when it has one)."""
    return [m.group(0).replace(" ", "") for m in _NUMBER.finditer(text or "")]


def _decimals(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    return -exponent if isinstance(exponent, int) and exponent < 0 else 0


def _values_of(cells: Iterable[Any]) -> list[float]:
    out: list[float] = []
    for cell in cells:
        if isinstance(cell, bool) or cell is None:
            continue
        if isinstance(cell, (int, float, Decimal)):
            if math.isfinite(float(cell)):
                out.append(float(cell))
            continue
        # Text cells carry numbers too: "Bàn 4", a date "2025-06-18", a time "12:40".
        for token in numbers_in_text(str(cell)):
            out += [float(r) for r in _readings(token)]
    return out


def _matches(written: Decimal, percent: bool, value: float) -> bool:
    places = _decimals(written)
    target = float(written)
    candidates = [value, abs(value)]
    if percent:
        candidates += [value * 100, abs(value) * 100]
    for v in candidates:
        if abs(round(v, places) - target) <= 10 ** -(places + 6):
            return True
        # A whole number written for a value the sentence rounded down or up ("about 32").
        if places == 0 and math.floor(v) <= target <= math.ceil(v) and abs(v - target) < 1:
            return True
    return False


def unsupported_numbers(sentence: str, columns: list[str], rows: list[tuple] | list[list],
                        question: str = "") -> list[str]:
    """The numbers of ``sentence`` that neither the result (its cells, column names and row count)
    nor the question holds; [] when every number is backed."""
    held = _values_of(cell for row in rows for cell in row)
    held += _values_of(columns)
    held.append(float(len(rows)))
    asked = {r for token in numbers_in_text(question) for r in _readings(token)}
    out = []
    for token in numbers_in_text(sentence):
        readings = _readings(token)
        if readings & asked:
            continue  # the question's own figure ("more than 20 minutes") is not a claim about the data
        percent = token.endswith("%")
        if not any(_matches(r, percent, v) for r in readings for v in held):
            out.append(token)
    return out
