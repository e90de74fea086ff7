"""Probability-weighted judge scores (G-Eval style): the expected value of each score field over the
probabilities the model gave to the score tokens, instead of the one integer it wrote.

A small judge writes 5 or 10 for almost any SQL (experiments/results/judge_scale.md), yet how
sure it was of that digit can still differ between right and wrong SQL; the expectation keeps that
difference and breaks the ties that make a stated score useless for ranking. It is read from the
token log-probabilities of the judge's own reply (setting ``judge_scores: expected``), so it costs no
extra call: at the position where a score's first digit was written, the alternatives that are
digits of the scale are weighted by their probabilities.

Qwen's tokenizer writes numbers digit by digit, so on a 1-10 scale the token "1" starts both 1 and
10. When "1" was the written token, the next position says how likely "0" followed. When another
digit was written, that split is unseen; the "1" mass then goes to the end of the scale nearer the
written score (a judge that wrote 9 and hesitated on "1" was hesitating on 10).
"""
from __future__ import annotations

import math
import re
from typing import Any, Callable

from reflect_sql.signatures.scales import Scale

# How many alternatives per position the judge's call asks the engine for (llama.cpp allows up to 20).
TOP_LOGPROBS = 10


def _get(entry: Any, key: str) -> Any:
    return entry[key] if isinstance(entry, dict) else getattr(entry, key)


def _tokens(logprobs: Any) -> list[Any]:
    content = _get(logprobs, "content") if logprobs is not None else None
    return list(content or [])


def _value_start(text: str, field: str, first: str) -> int | None:
    """Where the value of ``field`` begins in a ChatAdapter or JSON reply (its first character
    matching ``first``: a digit for a score)."""
    header = re.compile(r"\[\[ ## " + re.escape(field) + r" ## \]\]\s*|\"" + re.escape(field) + r"\"\s*:\s*\"?")
    found = None
    for found in header.finditer(text):
        pass  # the last header wins: a model that restates a field is read where the parser reads it
    if found is None:
        return None
    value = re.compile(r"\s*(" + first + ")").match(text, found.end())
    return value.start(1) if value else None


def _value_token(tokens: list[Any], text: str, offsets: list[int], field: str, first: str) -> int | None:
    """The index of the token in which ``field``'s value begins (see ``_value_start``), or None."""
    start = _value_start(text, field, first)
    if start is None:
        return None
    return next((i for i, off in enumerate(offsets) if off <= start < off + len(str(_get(tokens[i], "token")))), None)


def _alternatives(token: Any) -> list[Any]:
    return list(_get(token, "top_logprobs") or []) or [token]


def _probability_of_zero_next(tokens: list[Any], index: int) -> float | None:
    if index + 1 >= len(tokens):
        return None
    following = tokens[index + 1]
    alternatives = _alternatives(following)
    return sum(math.exp(_get(a, "logprob")) for a in alternatives if str(_get(a, "token")).startswith("0"))


def field_expectation(tokens: list[Any], text: str, offsets: list[int], field: str, scale: Scale) -> float | None:
    """The expected score of one field, or None when its digit cannot be located in the tokens."""
    index = _value_token(tokens, text, offsets, field, r"\d")
    if index is None:
        return None
    chosen = tokens[index]
    chosen_text = str(_get(chosen, "token")).strip()
    if not chosen_text.isdigit():
        return None
    alternatives = _alternatives(chosen)
    ambiguous_one = scale.high >= 10 and scale.low <= 1
    if chosen_text == "1" and ambiguous_one:
        seen = _probability_of_zero_next(tokens, index)
        share_of_ten = seen if seen is not None else 0.0
    else:
        written = int(chosen_text)
        share_of_ten = 1.0 if written >= (scale.low + scale.high) / 2 else 0.0
    mass = 0.0
    weighted = 0.0
    for alternative in alternatives:
        digits = str(_get(alternative, "token")).strip()
        if not digits.isdigit():
            continue
        p = math.exp(_get(alternative, "logprob"))
        if digits == "1" and ambiguous_one:
            value = share_of_ten * scale.high + (1 - share_of_ten) * 1
        else:
            value = int(digits)
            if not scale.low <= value <= scale.high:
                continue
        mass += p
        weighted += p * value
    return weighted / mass if mass > 0 else None


TRUE_WORDS = ("true", "yes")
FALSE_WORDS = ("false", "no")


def truth_probability(tokens: list[Any], text: str, offsets: list[int], field: str) -> float | None:
    """How sure the model was that a yes/no field is true: the probability of the true words at the
    position where the field's value was written, against the false ones (None when the value is
    not located, or neither word is among the alternatives there)."""
    index = _value_token(tokens, text, offsets, field, r"[A-Za-z]")
    if index is None:
        return None
    yes = no = 0.0
    for alternative in _alternatives(tokens[index]):
        word = str(_get(alternative, "token")).strip().strip('"').lower()
        if word in TRUE_WORDS:
            yes += math.exp(_get(alternative, "logprob"))
        elif word in FALSE_WORDS:
            no += math.exp(_get(alternative, "logprob"))
    return yes / (yes + no) if yes + no > 0 else None


def _read(logprobs: Any, fields: list[str], read: Callable[[list[Any], str, list[int], str], float | None]
          ) -> dict[str, float] | None:
    tokens = _tokens(logprobs)
    if not tokens:
        return None
    offsets, text = [], ""
    for token in tokens:
        offsets.append(len(text))
        text += str(_get(token, "token"))
    values = {}
    for field in fields:
        value = read(tokens, text, offsets, field)
        if value is None:
            return None
        values[field] = round(value, 3)
    return values


def expected_scores(logprobs: Any, scores: dict[str, Scale]) -> dict[str, float] | None:
    """Each score field's expected value from a reply's token log-probabilities; None when any field
    cannot be read (the caller then keeps the stated scores, all of them)."""
    return _read(logprobs, list(scores),
                 lambda tokens, text, offsets, field: field_expectation(tokens, text, offsets, field, scores[field]))


def truth_probabilities(logprobs: Any, fields: list[str]) -> dict[str, float] | None:
    """Each yes/no field's probability of being true; None when any field cannot be read."""
    return _read(logprobs, fields, truth_probability)
