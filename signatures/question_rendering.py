"""Question rendering: a question asked in another language, said in English for retrieval."""
from __future__ import annotations

import dspy


class RenderQuestion(dspy.Signature):
    """A manager asked a database a question in their own language. Say the same question in plain
    English, so that it can be matched against a schema whose tables and columns are named in
    English. Keep its meaning exactly: do not answer it, add to it or drop any condition. Copy
    names of things (dishes, people, places), quoted values, numbers and dates as they are written."""

    question: str = dspy.InputField(desc="The question, in the asker's language.")
    language: str = dspy.InputField(desc="The question's language, as detected (for example 'Vietnamese').")
    glossary: str = dspy.InputField(desc="Words of this database's business that the question uses, one per line "
                                    "as 'word: what it means here'; use these meanings. May be empty.")

    english_question: str = dspy.OutputField(desc="The same question in English, one sentence.")
