"""Getting the SQL out of what a model wrote: models wrap it in fences or prose despite instructions."""
from __future__ import annotations

import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

_FENCE = re.compile(r"```(?:[a-zA-Z]+)?\s*\n?(.*?)```", re.DOTALL)
# DSPy's field markers, which small models sometimes write inside a field ("... [[ ## completed ## ]]").
_MARKER = re.compile(r"\[\[\s*##\s*\w+\s*##\s*\]\]")
_START = re.compile(r"\b(WITH|SELECT)\b", re.IGNORECASE)
# Text that opens with a statement that writes, or reaches past the query (files, other databases,
# procedures), is kept whole even when a SELECT follows: cut down to that SELECT it would be a
# different query, answered as if it were the model's. Kept whole, the SQL gate (an AST check, which
# is what keeps data read-only) refuses it and the refusal goes back to the model. Each keyword must
# be followed by its statement's syntax, so that a label such as "Replace the join:" or "Drop the
# DISTINCT:" is still trimmed as prose.
_WRITE_START = re.compile(r"""
    (?:INSERT|REPLACE|UPSERT)(?:\s+OR\s+\w+)?\s+INTO\s
  | DELETE\s+FROM\s
  | UPDATE\s+(?:OR\s+\w+\s+)?(?:ONLY\s+)?[\w."`\[\]]+(?:\s+(?:AS\s+)?\w+)?\s+SET\s
  | MERGE\s+INTO\s
  | (?:CREATE|DROP)\s+(?:OR\s+REPLACE\s+)?(?:(?:TEMP|TEMPORARY|UNIQUE|VIRTUAL|MATERIALIZED|UNLOGGED|GLOBAL|LOCAL)\s+)*
      (?:TABLE|VIEW|INDEX|TRIGGER|FUNCTION|PROCEDURE|SCHEMA|DATABASE|EXTENSION|ROLE|USER|SEQUENCE|TYPE|RULE|SERVER)\s
  | ALTER\s+(?:TABLE|VIEW|INDEX|SCHEMA|DATABASE|ROLE|USER|SEQUENCE|FUNCTION|SYSTEM)\s
  | TRUNCATE\s+(?:TABLE\s+)?(?:ONLY\s+)?[\w."`\[\]]+\s*(?:;|$|CASCADE|RESTART)
  | (?:ATTACH|DETACH)\s+(?:DATABASE\s+)?['"\w]
  | VACUUM\b\s*(?:[\w"]+\s*)?(?:;|$|INTO\s|FULL|ANALYZE|FREEZE|VERBOSE)
  | REINDEX\b\s*(?:[\w."]+\s*)?(?:;|$)
  | PRAGMA\s+[\w."]+\s*(?:=|\(|;|$)
  | COPY\s+(?:\(|[\w."]+\s*(?:\([^)]*\)\s*)?(?:FROM|TO)\s)
  | CALL\s+[\w."]+\s*\(
  | EXEC(?:UTE)?\s+[\w."]+\s*(?:\(|;|$|@|'|\d)
  | (?:GRANT|REVOKE)\s+[\w\s,]+?\s(?:ON|TO|FROM)\s
  | DO\s+(?:LANGUAGE\s+\w+\s+)?(?:\$|')
""", re.IGNORECASE | re.VERBOSE)
# What may come before a statement without being prose: comments, a byte-order mark, stray ';'.
_LEADING_NOISE = re.compile(r"(?:\s|\ufeff|;|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)


def clean_sql(text: str | None) -> str:
    """The SQL inside ``text``: fenced block if any, from the first WITH/SELECT on (unless the text
    opens with a write statement, which stays whole for the gate to refuse), no trailing ';'.

    Returns "" when there is no SQL, which the callers record as a failed generation.
    """
    if not text:
        return ""
    # A lone surrogate (a model's bad JSON escape) could go neither to a database driver nor back
    # into the next prompt.
    text = str(text).encode("utf-8", "replace").decode("utf-8").strip()
    while (header := _MARKER.match(text)) is not None:  # the model restated its field's header
        text = text[header.end():].strip()
    text = _MARKER.split(text, 1)[0].strip()  # what follows a marker belongs to another field
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    elif text.startswith("```"):  # an unterminated fence (the model hit its token limit)
        text = text.split("\n", 1)[1] if "\n" in text else ""
    start = _START.search(text)
    if (start and start.start() > 0 and not text[: start.start()].strip().endswith(("(", ","))
            and not _WRITE_START.match(text, _LEADING_NOISE.match(text).end())):
        text = text[start.start():]  # prose before the query
    text = text.strip()
    while text.endswith(";"):
        text = text[:-1].rstrip()
    return text


def reads_as_sql(text: str | None) -> bool:
    """Whether ``text`` is a SQL statement rather than prose: small models asked to rephrase a
    question sometimes answer with the SQL they were shown."""
    text = clean_sql(text)
    if not _START.match(text):
        return False
    try:
        tree = sqlglot.parse_one(text)
    except (ParseError, TokenError, RecursionError):
        return False
    # A FROM clause separates "SELECT t.a FROM t JOIN ..." from an imperative such as "select the
    # heroes who can fly", which parses as a column list.
    return isinstance(tree, exp.Query) and tree.find(exp.From) is not None
