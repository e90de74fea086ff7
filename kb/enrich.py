"""Enrichment (paper section 3): what a fully verified answer teaches the KB, with provenance,
versioning, history and rollback.

``enrich`` adds the verified example (question -> SQL, with the tables and columns it uses), and
optionally clarifies column meanings and adds value aliases ("bubble tea" -> menu.name =
'Trà sữa nướng'). It is refused, changing nothing, unless every check passed: each judgment, the
execution of the SQL, and the SQL resolving against the KB's schema. An accepted enrichment is one
new KB version whose log line records the question, SQL, scores, result shape and time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from reflect_sql.kb.build import sync_indexes
from reflect_sql.kb.documents import example_id
from reflect_sql.kb.model import Example, KnowledgeBase
from reflect_sql.kb.usage import UsageError, sql_usage
from reflect_sql.kb.values import VALUES_FILE, ValueIndex
from reflect_sql.kb.versions import KBDir


@dataclass
class EnrichmentResult:
    accepted: bool
    version: int | None = None  # the new version when accepted
    reasons: list[str] = field(default_factory=list)  # why it was refused
    changes: list[dict[str, Any]] = field(default_factory=list)


def judgment_failure(name: str, judgment: Any) -> str | None:
    """None when the judgment passed, else the reason it did not. The program asks this too before
    it offers an answer, so what it calls verified and what the KB accepts cannot drift apart.

    A judgment is a bool, or a mapping with ``passed``, or with ``score`` and ``threshold``
    (passed when score >= threshold).
    """
    if isinstance(judgment, bool):
        return None if judgment else f"check {name!r} failed"
    if isinstance(judgment, Mapping):
        if "passed" in judgment:
            return None if judgment["passed"] is True else f"check {name!r} failed"
        if "score" in judgment and "threshold" in judgment:
            try:
                ok = float(judgment["score"]) >= float(judgment["threshold"])
            except (TypeError, ValueError):
                return f"check {name!r} has a non-numeric score or threshold"
            return None if ok else f"check {name!r} scored {judgment['score']} < {judgment['threshold']}"
    return f"check {name!r} is not a bool or a {{passed}} / {{score, threshold}} mapping"


def _result_shape(result: Any) -> tuple[dict[str, Any] | None, str | None]:
    """(summary for the log, refusal reason) of a QueryResult or its ``to_json()`` dict."""
    if result is None:
        return None, "the SQL was not executed (no result)"
    if isinstance(result, Mapping):
        if result.get("error"):
            return None, f"the SQL failed: {result['error']}"
        columns, rows = result.get("columns"), result.get("rows")
    else:
        columns, rows = getattr(result, "columns", None), getattr(result, "rows", None)
    if columns is None or rows is None:
        return None, "the result has no columns/rows"
    return {"columns": list(columns), "rows": len(rows), "first_rows": [list(r) for r in list(rows)[:3]]}, None


def _parse_column(kb: KnowledgeBase, qualified: str):
    table, _, column = qualified.partition(".")
    entry = kb.column(table, column) if column else None
    return kb.table(table), entry


def enrich(kb_dir: str | Path, question: str, sql: str, result: Any, judgments: Mapping[str, Any], *,
           evidence: str = "", clarifications: Mapping[str, str] | None = None,
           aliases: Mapping[str, tuple[str, str]] | None = None, verified_by: str = "pipeline") -> EnrichmentResult:
    """Teach the KB one verified answer.

    ``judgments``: check name -> bool | {"passed": bool} | {"score": x, "threshold": t}; every one
    must pass and there must be at least one. ``clarifications``: "table.column" -> meaning.
    ``aliases``: alias -> ("table.column", stored value); the value must be one the column holds.
    ``verified_by``: "pipeline" (the judges alone) or "human" (a person confirmed it too, as the chat's
    "correct" does); a human verification is always a version of its own in the history, also of an
    example the KB already holds.
    Concurrent enrichments of one KB (threads or processes) are serialised.
    """
    with KBDir(kb_dir).locked():
        return _enrich(kb_dir, question, sql, result, judgments, evidence=evidence, clarifications=clarifications,
                       aliases=aliases, verified_by=verified_by)


def _enrich(kb_dir: str | Path, question: str, sql: str, result: Any, judgments: Mapping[str, Any], *,
            evidence: str, clarifications: Mapping[str, str] | None,
            aliases: Mapping[str, tuple[str, str]] | None, verified_by: str = "pipeline") -> EnrichmentResult:
    directory = KBDir(kb_dir)
    kb = directory.load()
    reasons = []
    if not judgments:
        reasons.append("no judgments given: nothing shows the answer was verified")
    for name, judgment in (judgments or {}).items():
        reason = judgment_failure(name, judgment)
        if reason:
            reasons.append(reason)
    shape, reason = _result_shape(result)
    if reason:
        reasons.append(reason)
    if not question.strip() or not sql.strip():
        reasons.append("question and SQL must be non-empty")
    try:
        used_tables, used_columns = sql_usage(sql, kb.sqlglot_mapping(), kb.dialect)
    except UsageError as exc:
        used_tables, used_columns = [], []
        reasons.append(f"the SQL does not resolve against the KB's schema: {exc}")

    changes: list[dict[str, Any]] = []
    for qualified, meaning in (clarifications or {}).items():
        table, column = _parse_column(kb, qualified)
        if column is None or not str(meaning).strip():
            reasons.append(f"clarification for unknown column or empty: {qualified!r}")
            continue
        changes.append({"kind": "clarify", "column": f"{table.name}.{column.name}",
                        "before": column.description, "after": str(meaning).strip()})
    index = ValueIndex(Path(kb_dir) / VALUES_FILE)
    try:
        for alias, target in (aliases or {}).items():
            qualified, value = target
            table, column = _parse_column(kb, qualified)
            if column is None:
                reasons.append(f"alias {alias!r} names an unknown column {qualified!r}")
                continue
            held = [v for t, c, v in index.columns_holding(value)
                    if (t.lower(), c.lower()) == (table.name.lower(), column.name.lower())]
            if not held:
                reasons.append(f"alias {alias!r}: {qualified} holds no value {value!r}")
                continue
            changes.append({"kind": "alias", "column": f"{table.name}.{column.name}", "alias": alias,
                            "value": held[0]})
    finally:
        index.close()
    if reasons:
        return EnrichmentResult(accepted=False, reasons=reasons)

    example = Example(question=question.strip(), sql=sql.strip(), evidence=evidence.strip(), tables=used_tables,
                      columns=used_columns, source="enrichment")
    if example_id(example) not in {example_id(e) for e in kb.examples}:
        kb.examples.append(example)
        changes.insert(0, {"kind": "example", "question": example.question, "sql": example.sql})
    elif verified_by == "human":
        # The content stays; the version records that a person has now confirmed this example.
        changes.insert(0, {"kind": "verify", "question": example.question, "sql": example.sql})
    for change in changes:
        if change["kind"] == "clarify":
            table, _, column = change["column"].partition(".")
            entry = kb.column(table, column)
            entry.description, entry.description_source = change["after"], "enrichment"
        elif change["kind"] == "alias":
            table, _, column = change["column"].partition(".")
            kb.column(table, column).aliases[change["alias"]] = change["value"]
    if not changes:
        return EnrichmentResult(accepted=True, version=kb.version, changes=[])

    provenance = {"question": question, "evidence": evidence, "sql": sql, "judgments": dict(judgments),
                  "result": shape, "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "verified_by": verified_by}
    summary = f"{'human-verified' if verified_by == 'human' else 'verified'} answer to: {question[:80]}"
    version = directory.commit(kb, "enrich", summary, provenance, changes)
    sync_indexes(Path(kb_dir), kb)
    return EnrichmentResult(accepted=True, version=version, changes=changes)


def history(kb_dir: str | Path) -> list[dict[str, Any]]:
    """Every version, oldest first: action, time, summary, provenance and changes."""
    return KBDir(kb_dir).history()


def rollback(kb_dir: str | Path, version: int) -> KnowledgeBase:
    """Make version ``version``'s content current again (as a new version) and resync the indexes."""
    with KBDir(kb_dir).locked() as directory:
        kb = directory.rollback(int(version))
        sync_indexes(Path(kb_dir), kb)
    return kb
