"""The inputs every signature about one question opens with: the question and its evidence.

Each signature that subclasses ``AboutAQuestion`` lists them first, in this order, with these
descriptions unless it says otherwise (a field it declares again keeps its place).
"""
from __future__ import annotations

import dspy


class AboutAQuestion(dspy.Signature):
    """A task about one question a user asks of a database."""

    question: str = dspy.InputField(desc="The user's question.")
    evidence: str = dspy.InputField(desc="External knowledge or hints for this question; may be empty.")
