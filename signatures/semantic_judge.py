"""Semantic judge (paper section 4, semantic sub-loop): does the SQL mean what the question asks?

Two forms of the same four criteria (setting ``judge_form``): ``SemanticJudge`` asks for a
rationale and a 1-10 score per criterion; ``SemanticChecks`` asks each criterion as a True/False
question, answered first, and the program places the probability of True on the 1-10 scale
(``programs/judgment.py``). The second costs a few tokens instead of four rationales, and on the
embedded 1.5B it ranks right and wrong SQL where the scores do not
(experiments/results/judge_scale.md).
"""
from __future__ import annotations

import dspy

from reflect_sql.signatures.question import AboutAQuestion
from reflect_sql.signatures.scales import ONE_LINE, SEMANTIC_SCALE, Score10


class SemanticJudge(AboutAQuestion):
    """You review a SQL query written for a question, before it runs. Judge its meaning, not its
    style. For each criterion write a one-line rationale, then its score, an integer from 1 (wrong) to 10
    (right) that agrees with the rationale:

    - column consistency C: does it select and filter on the columns the question refers to, with
      the right meaning (e.g. the price column, not an id)? 1 = wrong columns throughout;
      5 = the main column is right but another is wrong or missing, or extra columns are returned;
      10 = exactly the columns the question asks for.
    - granularity and aggregation G: is the level of detail right (per item vs. per group vs. one
      total), with the right aggregate (COUNT/SUM/AVG/MAX), GROUP BY, DISTINCT and LIMIT?
      1 = wrong level or wrong aggregate; 5 = right aggregate but wrong grouping, or a missing
      DISTINCT/LIMIT; 10 = exactly the asked granularity.
    - join consistency J: are the tables joined on the right keys, with no missing bridge table,
      no spurious join that duplicates rows, and the right join type? 1 = wrong or missing join
      keys; 5 = joins run but one is spurious or duplicates rows; 10 = correct joins (or none needed).
    - query logic Q: are filters, conditions, value literals, ordering, arithmetic (no integer
      division for ratios; zero denominators guarded) and NULL handling right? 1 = the logic
      answers a different question; 5 = one condition or computation is wrong; 10 = all correct.

    Then give a diagnosis: the concrete problems and how to fix them, or "none" if there are none."""

    schema_context: str = dspy.InputField(desc="The relevant tables and columns.")
    sql: str = dspy.InputField(desc="The SQL query under review.")

    column_rationale: str = dspy.OutputField(desc=f"{ONE_LINE} on column consistency.")
    column_consistency: Score10 = dspy.OutputField(desc=SEMANTIC_SCALE.describe(
        "C", {1: "wrong columns", 5: "one column wrong or missing", 10: "exactly the asked columns"}))
    granularity_rationale: str = dspy.OutputField(desc=f"{ONE_LINE} on granularity and aggregation.")
    granularity: Score10 = dspy.OutputField(desc=SEMANTIC_SCALE.describe(
        "G", {1: "wrong level or aggregate", 5: "grouping or DISTINCT/LIMIT off", 10: "exactly the asked granularity"}))
    join_rationale: str = dspy.OutputField(desc=f"{ONE_LINE} on the joins.")
    join_consistency: Score10 = dspy.OutputField(desc=SEMANTIC_SCALE.describe(
        "J", {1: "wrong or missing join keys", 5: "a spurious join", 10: "correct joins, or none needed"}))
    logic_rationale: str = dspy.OutputField(desc=f"{ONE_LINE} on filters, arithmetic and conditions.")
    query_logic: Score10 = dspy.OutputField(desc=SEMANTIC_SCALE.describe(
        "Q", {1: "answers a different question", 5: "one condition wrong", 10: "all correct"}))
    diagnosis: str = dspy.OutputField(desc="The concrete problems and their fixes, or 'none'.")


class SemanticChecks(AboutAQuestion):
    """You review a SQL query written for a question, before it runs. Judge its meaning, not its
    style, on four criteria: the columns it selects and filters on; its granularity and aggregation;
    its joins; its logic (filters, literals, ordering, arithmetic, NULLs). Answer each with True or
    False, then give a diagnosis: the concrete problems and how to fix them, or "none" if there are
    none."""

    schema_context: str = dspy.InputField(desc="The relevant tables and columns.")
    sql: str = dspy.InputField(desc="The SQL query under review.")

    columns_right: bool = dspy.OutputField(desc=(
        "True when it selects and filters on exactly the columns the question refers to, with the right meaning "
        "(e.g. the price column, not an id), and returns no extra columns"))
    granularity_right: bool = dspy.OutputField(desc=(
        "True when the level of detail is the asked one (per item, per group or one total), with the right "
        "aggregate, GROUP BY, DISTINCT and LIMIT"))
    joins_right: bool = dspy.OutputField(desc=(
        "True when the tables are joined on the right keys, with no missing bridge table and no spurious join "
        "that duplicates rows (or no join is needed)"))
    logic_right: bool = dspy.OutputField(desc=(
        "True when the filters, value literals, ordering, arithmetic (no integer division for ratios) and NULL "
        "handling are right"))
    diagnosis: str = dspy.OutputField(desc="The concrete problems and their fixes, or 'none'.")
