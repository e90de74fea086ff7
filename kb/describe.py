"""Optional LLM describer: writes a description for each column that has none.

The LM (or a whole predictor) is passed in; nothing here chooses a model. Descriptions are stored in
the KB with ``description_source = "llm"`` and carried over by every rebuild, so each column is
described once (the KB is the cache). A description from the sources always wins over one written
here.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import dspy

from reflect_sql.kb.model import ColumnEntry, TableEntry
from reflect_sql.signatures.column_describer import ColumnDescriber

MAX_WORDS = 40
SAMPLES = 5


class DescriptionWriter:
    """``describer(table, column) -> str``, the callable ``build_from_engine(describer=...)`` takes."""

    def __init__(self, lm: Any = None, predictor: Any = None):
        self.lm = lm
        self.predictor = predictor if predictor is not None else dspy.Predict(ColumnDescriber)
        self.calls = 0

    def __call__(self, table: TableEntry, column: ColumnEntry) -> str:
        context = dspy.context(lm=self.lm) if self.lm is not None else nullcontext()
        with context:
            prediction = self.predictor(
                table=table.name,
                column=column.name,
                column_type=column.type or "",
                sample_values=[str(v) for v in column.samples[:SAMPLES]],
                sibling_columns=[c.name for c in table.columns if c.name != column.name],
            )
        self.calls += 1
        return clean_description(getattr(prediction, "description", "") or "", column.name)


def clean_description(text: str, column: str) -> str:
    """One line, bounded; empty when the model only echoed the column's name."""
    text = " ".join(str(text).split()).strip().strip('"').strip()
    words = text.split()
    if len(words) > MAX_WORDS:
        text = " ".join(words[:MAX_WORDS]).rstrip(",;") + "…"
    if text.lower().rstrip(".") in {column.lower(), column.lower().replace("_", " ")}:
        return ""
    return text
