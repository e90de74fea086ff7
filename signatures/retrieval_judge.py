"""Retrieval judge (paper section 3): is the retrieved schema context enough to write the SQL?"""
from __future__ import annotations

import dspy

from reflect_sql.signatures.question import AboutAQuestion
from reflect_sql.signatures.scales import RETRIEVAL_SCALE, SHORT_LIST, Score10


class RetrievalJudge(AboutAQuestion):
    """You review the database schema context retrieved for a question, before any SQL is written.
    Decide whether a careful analyst could write the correct SQL from this context alone.

    Score two things, each an integer from 1 (worst) to 10 (best):
    - relevance R: are the retrieved tables and columns about what the question asks?
      1 = none of them relate to the question; 5 = some relate, but much of the context is noise or
      the central entity is only loosely covered; 10 = every retrieved element bears on the question.
    - completeness C: is everything the SQL needs present: every entity, measure, filter column,
      value, and the join path (keys) connecting the tables?
      1 = the central table or measure is missing; 5 = the main table is there but a filter column,
      a needed value or a join key is missing; 10 = nothing is missing.

    List the missing aspects concretely (for example "no column holding the order date", "no
    join path from dishes to orders"), an empty list when nothing is missing. Then rewrite the
    question as a retrieval query that names the missing concepts explicitly, in schema terms,
    so that a second search finds them; keep the question's meaning, do not answer it.
    A reviewer's diagnosis from an earlier attempt, when given, says what went wrong downstream."""

    evidence: str = dspy.InputField(desc="External knowledge or hints that come with the question; may be empty.")
    schema_context: str = dspy.InputField(desc="The retrieved tables, columns, sample values and examples.")
    diagnosis: str = dspy.InputField(desc="What an earlier attempt got wrong; empty on the first attempt.")

    missing_aspects: list[str] = dspy.OutputField(
        desc=f"{SHORT_LIST}: concrete things the SQL needs that the context lacks; [] when nothing is missing."
    )
    relevance: Score10 = dspy.OutputField(desc=RETRIEVAL_SCALE.describe(
        "R", {1: "unrelated", 5: "partly related", 10: "every element relevant"}))
    completeness: Score10 = dspy.OutputField(desc=RETRIEVAL_SCALE.describe(
        "C", {1: "the central table or measure missing", 5: "a filter, value or join key missing", 10: "nothing missing"}))
    rewritten_question: str = dspy.OutputField(
        desc="Q': the question restated for a second schema search, naming the missing concepts."
    )
