"""Syntax repairer (paper section 4, syntax sub-loop): fix SQL that the engine refused to compile."""
from __future__ import annotations

import dspy

from reflect_sql.signatures.question import AboutAQuestion


class RepairSQL(AboutAQuestion):
    """The SQL query below failed when the database engine compiled it; the engine's error message
    is given. Rewrite it so that it compiles in the given dialect and still answers the question.
    Change only what the error requires (misspelled or unknown names, missing joins, wrong function
    names, dialect syntax); use only tables and columns from the schema context. The result must
    be a single read-only SELECT (or WITH ... SELECT): statements that modify data are refused."""

    question: str = dspy.InputField(desc="The user's question the SQL must answer.")
    dialect: str = dspy.InputField(desc="SQL dialect of the database, e.g. sqlite or postgres.")
    schema_context: str = dspy.InputField(desc="The relevant tables and columns.")
    sql: str = dspy.InputField(desc="The SQL that failed.")
    error: str = dspy.InputField(desc="The engine's error message for that SQL.")

    repaired_sql: str = dspy.OutputField(desc="The corrected SQL query only: no explanation, no markdown fences.")
