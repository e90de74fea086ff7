"""Training examples for the compiled predictors, built from a train split's gold SQL.

- Generator: the question with the context the pipeline would retrieve for it, and the gold SQL.
- Judges: known-right and known-wrong SQL. Each train question gives its gold query (label
  right) and one gold query with a typical mistake injected (``perturb``; label wrong), the kinds
  taken in rotation. A perturbed query counts as wrong only when it runs and returns other rows
  than the gold query on the database, so the labels are facts, not guesses. Each example also
  carries a reference judgment written from what is known to be wrong (e.g. J=2 with the
  misplaced join key named), the anchors LabeledFewShot shows the judge.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import dspy
import sqlglot
from sqlglot import exp

from reflect_sql.experiments.datasets import Question
from reflect_sql.experiments.metrics import match
from reflect_sql.optimize.perturb import KINDS, described_variants
from reflect_sql.programs.checks import check_result, render_findings
from reflect_sql.programs.entailment_loop import execute, result_preview
from reflect_sql.programs.retriever import render_examples
from reflect_sql.settings import Settings

ProgramFor = Callable[[Question], Any]  # a per-database program (as the experiments pipeline builds it)


def _handles(program: Any) -> Any:
    """What the program runs on (its engine and retriever), wherever the program keeps them."""
    return getattr(program, "handles", program)

GENERATOR_INPUTS = ("question", "evidence", "dialect", "schema_context", "examples", "feedback")
SEMANTIC_INPUTS = ("question", "evidence", "schema_context", "sql")
ENTAILMENT_INPUTS = ("question", "evidence", "schema_context", "sql", "result_preview", "check_findings")

# The semantic criterion each mistake offends, and how low the rubric puts it.
_SEMANTIC_HIT = {
    "wrong_join": ("join_consistency", "join_rationale", 2),
    "dropped_filter": ("query_logic", "logic_rationale", 3),
    "wrong_aggregation": ("granularity", "granularity_rationale", 2),
    "integer_division": ("query_logic", "logic_rationale", 3),
}
_SEMANTIC_FINE = {
    "column_consistency": ("column_rationale", "Selects and filters on the columns the question refers to."),
    "granularity": ("granularity_rationale", "The level of detail and the aggregates match the question."),
    "join_consistency": ("join_rationale", "Joins, if any, follow the key columns of the schema."),
    "query_logic": ("logic_rationale", "Filters, literals and arithmetic express the question."),
}
# (E_schema, E_data) the entailment rubric gives each mistake: wrong meaning, and for integer
# division a result that cannot be the answer.
_ENTAILMENT = {"wrong_join": (2, 3), "dropped_filter": (2, 3), "wrong_aggregation": (2, 3), "integer_division": (4, 1)}


@dataclass
class Case:
    """One labelled query for the judges."""

    question: Question
    sql: str
    correct: bool
    kind: str  # "gold" or a perturbation kind
    note: str  # what is wrong ("" for gold)
    schema_context: str
    result_preview: str
    check_findings: str


class Contexts:
    """What the pipeline shows the model for a question: retrieved context, dialect, schema (cached)."""

    def __init__(self, program_for: ProgramFor, settings: Settings):
        self.program_for = program_for
        self.settings = settings
        self._schemas: dict[str, Any] = {}

    def retrieved(self, q: Question) -> tuple[str, str, str]:
        """(schema_context, examples, dialect) as the first generation of the pipeline sees them."""
        handles = _handles(self.program_for(q))
        s = self.settings
        context = handles.retriever.retrieve(q.question, s.k_tables, s.m_columns, evidence=q.evidence or "")
        text = context.render()
        return text, render_examples(context, text), handles.engine.dialect

    def schema(self, q: Question):
        if q.db_id not in self._schemas:
            engine = _handles(self.program_for(q)).engine
            self._schemas[q.db_id] = engine.introspect(str(q.tables_json) if q.tables_json else None, q.db_id)
        return self._schemas[q.db_id]

    def run(self, q: Question, sql: str) -> tuple[str, str] | None:
        """(result_preview, check_findings) for ``sql``, or None when it does not run."""
        engine = _handles(self.program_for(q)).engine
        result, error = execute(engine, sql, self.settings)
        if result is None:
            return None
        findings = check_result(q.question, sql, result.columns, result.rows, schema=self.schema(q),
                                dialect=engine.dialect, truncated=result.truncated)
        return result_preview(result), render_findings(findings)


def generator_examples(questions: list[Question], contexts: Contexts, fmt: str) -> list[dspy.Example]:
    out = []
    for q in questions:
        schema_context, examples, dialect = contexts.retrieved(q)
        out.append(dspy.Example(
            question=q.question, evidence=q.evidence or "", dialect=dialect, schema_context=schema_context,
            examples=examples, feedback="", sql=q.gold_sql,
            key=q.key, db_path=str(q.db_path), fmt=fmt,
        ).with_inputs(*GENERATOR_INPUTS))
    return out


def _negative(q: Question, position: int, contexts: Contexts, fmt: str, timeout_s: float) -> tuple[str, str, str] | None:
    """(kind, sql, note) of the first mistake, kinds in rotation from ``position``, that changes the rows."""
    schema = contexts.schema(q)
    dialect = schema.dialect if schema is not None else "sqlite"
    for offset in range(len(KINDS)):
        kind = KINDS[(position + offset) % len(KINDS)]
        try:
            found = described_variants(q.gold_sql, kind, schema, dialect)
        except ValueError:
            return None  # gold SQL sqlglot cannot read: no perturbation at all
        for sql, note in found:
            if match(fmt, sql, q.gold_sql, q.db_path, timeout_s).status == "wrong":
                return kind, sql, note
    return None


def judge_cases(questions: list[Question], contexts: Contexts, fmt: str, timeout_s: float = 30.0) -> list[Case]:
    cases = []
    for position, q in enumerate(questions):
        schema_context, _, _ = contexts.retrieved(q)
        candidates = [("gold", q.gold_sql, "", True)]
        negative = _negative(q, position, contexts, fmt, timeout_s)
        if negative is not None:
            kind, sql, note = negative
            candidates.append((kind, sql, note, False))
        for kind, sql, note, correct in candidates:
            ran = contexts.run(q, sql)
            if ran is None:  # the engine's guard or dialect refused what sqlite ran: leave it out
                continue
            cases.append(Case(q, sql, correct, kind, note, schema_context, *ran))
    return cases


def semantic_reference(case: Case) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for score_field, (rationale_field, fine) in _SEMANTIC_FINE.items():
        out[rationale_field] = fine
        out[score_field] = 10 if case.correct else 9
    if case.correct:
        out["diagnosis"] = "none"
        return out
    score_field, rationale_field, low = _SEMANTIC_HIT[case.kind]
    out[score_field] = low
    out[rationale_field] = f"The query {case.note}."
    out["diagnosis"] = f"The query {case.note}. Fix that and keep the rest."
    return out


def entailment_reference(case: Case) -> dict[str, Any]:
    if case.correct:
        return {"e_schema": 5, "e_data": 5, "diagnosis": "none"}
    e_schema, e_data = _ENTAILMENT[case.kind]
    return {"e_schema": e_schema, "e_data": e_data, "diagnosis": f"The query {case.note}. Fix that and keep the rest."}


def semantic_examples(cases: list[Case]) -> list[dspy.Example]:
    return [dspy.Example(
        question=c.question.question, evidence=c.question.evidence or "", schema_context=c.schema_context, sql=c.sql,
        **semantic_reference(c), label=c.correct, kind=c.kind, key=c.question.key,
    ).with_inputs(*SEMANTIC_INPUTS) for c in cases]


def entailment_examples(cases: list[Case]) -> list[dspy.Example]:
    return [dspy.Example(
        question=c.question.question, evidence=c.question.evidence or "", schema_context=c.schema_context, sql=c.sql,
        result_preview=c.result_preview, check_findings=c.check_findings,
        **entailment_reference(c), label=c.correct, kind=c.kind, key=c.question.key,
    ).with_inputs(*ENTAILMENT_INPUTS) for c in cases]


# --- shorter demos ---------------------------------------------------------------------------

_CREATE = re.compile(r'^\s*CREATE TABLE\s+("?)([^"(\s]+(?:""[^"(\s]*)*)\1', re.IGNORECASE)


def sql_tables(sql: str, dialect: str = "sqlite") -> set[str]:
    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
    except sqlglot.errors.SqlglotError:
        return set()
    return {t.name.lower() for tree in trees for t in tree.find_all(exp.Table)}


def trim_schema_context(text: str, sql: str, dialect: str = "sqlite") -> str:
    """``text`` without the CREATE TABLE blocks of tables ``sql`` does not use.

    A demo repeats its whole schema context in every prompt that carries it; a small model's
    context has room for that only when the context is cut to what the demo's query needs. Lines
    outside CREATE TABLE blocks are kept. When nothing would be left, the text is returned whole.
    """
    used = sql_tables(sql, dialect)
    if not used:
        return text
    kept: list[str] = []
    skipping = False
    dropped = found_used = False
    for line in text.splitlines():
        header = _CREATE.match(line)
        if header:
            name = header.group(2).replace('""', '"').lower()
            skipping = name not in used
            dropped |= skipping
            found_used |= not skipping
        if not skipping:
            kept.append(line)
        if skipping and line.strip().startswith(");"):
            skipping = False
    if not dropped or not found_used:
        return text
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip("\n")
