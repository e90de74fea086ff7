"""Entailment judge (paper section 5): does the executed result actually answer the question?

``EntailmentJudge`` scores E_schema and E_data on 1-5; ``EntailmentChecks`` (setting
``judge_form: checks``) asks each as a True/False question, placed on the same scale by the
program (``programs/judgment.py``)."""
from __future__ import annotations

import dspy

from reflect_sql.signatures.question import AboutAQuestion
from reflect_sql.signatures.scales import ENTAILMENT_SCALE, Score5


class EntailmentJudge(AboutAQuestion):
    """A SQL query was run for a question; you see the query, a preview of its result and the
    findings of automatic result checks. Judge whether the result entails an answer to the question.

    Score two things, each an integer from 1 (wrong) to 5 (right):
    - schema entailment E_schema: do the tables, columns, joins and filters used mean what the
      question asks? 1 = they answer a different question; 3 = mostly right with one mismatch
      (a wrong filter value, a wrong column); 5 = they exactly express the question.
    - data entailment E_data: does the returned data look like the answer? Consider the number
      of rows, the columns, value types and ranges (a rate between 0 and 1 or a percentage up to
      100, no truncated integer ratios), NULLs and duplicates. 1 = the data cannot be the answer
      (wrong kind of values, division artefacts, a shape that contradicts the question);
      3 = plausible but suspicious (e.g. no rows, or NULLs where values are expected);
      5 = clearly the answer.
    Each automatic check finding is a measured fact about this result, not an opinion: an error
    finding means the data cannot be the answer as it stands; a warning is a suspicion for you to
    weigh (an empty result can be the right answer). Then give a diagnosis: what is wrong
    and how the query should change (address every finding), or "none" when the result answers
    the question."""

    schema_context: str = dspy.InputField(desc="The relevant tables and columns.")
    sql: str = dspy.InputField(desc="The executed SQL.")
    result_preview: str = dspy.InputField(desc="Row count, column names and the first rows of the result.")
    check_findings: str = dspy.InputField(desc="Findings of the deterministic result checks, or that all passed.")

    e_schema: Score5 = dspy.OutputField(desc=ENTAILMENT_SCALE.describe(
        "E_schema", {1: "answers a different question", 3: "one mismatch", 5: "exactly the question"}))
    e_data: Score5 = dspy.OutputField(desc=ENTAILMENT_SCALE.describe(
        "E_data", {1: "cannot be the answer", 3: "plausible but suspicious", 5: "clearly the answer"}))
    diagnosis: str = dspy.OutputField(desc="What is wrong with the result and how to fix the query, or 'none'.")


class EntailmentChecks(AboutAQuestion):
    """A SQL query was run for a question; you see the query, a preview of its result and the
    findings of automatic result checks. Judge whether the result answers the question, on two
    criteria: whether the query's tables, columns, joins and filters mean what the question asks,
    and whether the returned data looks like the answer. Each automatic check finding is a measured
    fact about this result: an error finding means the data cannot be the answer as it stands; a
    warning is a suspicion for you to weigh (an empty result can be the right answer). Answer each
    criterion with True or False, then give a diagnosis: what is wrong and how the query should
    change (address every finding), or "none" when the result answers the question."""

    schema_context: str = dspy.InputField(desc="The relevant tables and columns.")
    sql: str = dspy.InputField(desc="The executed SQL.")
    result_preview: str = dspy.InputField(desc="Row count, column names and the first rows of the result.")
    check_findings: str = dspy.InputField(desc="Findings of the deterministic result checks, or that all passed.")

    schema_right: bool = dspy.OutputField(desc=(
        "True when the tables, columns, joins and filters used mean exactly what the question asks"))
    data_right: bool = dspy.OutputField(desc=(
        "True when the returned data looks like the answer: row count, columns, value types and ranges, "
        "no NULLs or duplicates where values are expected"))
    diagnosis: str = dspy.OutputField(desc="What is wrong with the result and how to fix the query, or 'none'.")
