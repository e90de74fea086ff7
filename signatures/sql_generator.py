"""SQL generator (paper section 4): question + schema context (+ feedback) -> one SQL query."""
from __future__ import annotations

import dspy

from reflect_sql.signatures.question import AboutAQuestion


class GenerateSQL(AboutAQuestion):
    """Write one read-only SQL query (a single SELECT, or WITH ... SELECT) in the given dialect that
    answers the question over the database described by the schema context.

    Use only tables and columns that appear in the schema context, with their exact names (quote
    names that contain spaces or symbols). Follow the evidence when it defines terms or formulas.
    Return exactly the columns the question asks for, in the order it asks. Use the join keys shown
    in the context. For rates, ratios and percentages, avoid integer division (CAST to REAL) and
    guard against zero denominators. When feedback on an earlier attempt is given, fix every
    problem it names rather than repeating the earlier query."""

    dialect: str = dspy.InputField(desc="SQL dialect of the database, e.g. sqlite or postgres.")
    schema_context: str = dspy.InputField(desc="The relevant tables and columns, with meanings and sample values.")
    examples: str = dspy.InputField(desc="Verified question/SQL pairs on this database; may be empty.")
    feedback: str = dspy.InputField(desc="Problems found in earlier attempts, to fix now; empty on the first attempt.")

    sql: str = dspy.OutputField(desc="The SQL query only: no explanation, no markdown fences.")
