"""Errors that reach the user as one clear line and exit code 2, never a traceback, and the checks
of a question, which every entry point (the programs, ``ask``, ``kb search``) applies the same way."""
from __future__ import annotations

from typing import Any


class UserError(Exception):
    """Bad input from the user (missing file, malformed dataset, unknown db_id, ...)."""


class InvalidQuestion(UserError):
    """One question that cannot be asked (empty, too long, not text). In an evaluation it is that
    question's error, not the run's: the other questions are fine."""


# A question, not a document: longer text cannot fit the embedded model's context with a schema.
MAX_QUESTION_CHARS = 10_000


def require_text(text: str, what: str) -> str:
    """``text`` if every character can reach a model; undecodable input bytes (read from argv as
    lone surrogates) cannot, and would fail deep inside the LM client."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidQuestion(f"the {what} holds bytes that are not UTF-8 text; check the terminal's or the file's "
                              "encoding") from None
    return text


def require_question(question: Any) -> str:
    if not isinstance(question, str) or not question.strip():
        raise InvalidQuestion("the question is empty: ask something, e.g. \"How many dishes are on the menu?\"")
    if len(question) > MAX_QUESTION_CHARS:
        raise InvalidQuestion(f"the question is {len(question):,} characters long; at most {MAX_QUESTION_CHARS:,} are accepted")
    return require_text(question, "question").strip()
