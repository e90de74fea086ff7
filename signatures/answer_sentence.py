"""Answer sentence: a verified result told in one or two sentences, in the question's language."""
from __future__ import annotations

import dspy


class WriteAnswer(dspy.Signature):
    """A SQL query answered a question and its result was checked to answer it. Tell the person
    who asked the answer in one or two short sentences, in the language of the question (a
    Vietnamese question gets a Vietnamese answer, an English one an English answer).

    State only what the result shows: copy every number exactly as the result preview gives it
    (you may round it or add its unit), never compute, estimate or invent a number. Name the
    things the rows name. Do not mention SQL, tables, columns or queries. If the result has no
    rows, say that nothing matches."""

    question: str = dspy.InputField(desc="The question, in the asker's language.")
    sql: str = dspy.InputField(desc="The SQL query that was run.")
    result_preview: str = dspy.InputField(desc="Row count, column names and the first rows of the result.")

    answer: str = dspy.OutputField(desc="One or two sentences in the question's language; no markdown.")
