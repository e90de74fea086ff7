"""Handles on what a program uses but does not own: the engine, the retriever and the LMs.

DSPy optimizers deep-copy programs; a copy must share these (a database connection or a loaded
model cannot be copied), while its predictors and settings are copied. ``Handles`` copies as itself.
"""
from __future__ import annotations

from typing import Any

from reflect_sql.db.base import Engine, EngineError
from reflect_sql.db.schema import Schema


class Handles:
    def __init__(self, engine: Engine, retriever: Any = None, generator_lm: Any = None, judge_lm: Any = None):
        self.engine = engine
        self.retriever = retriever
        self.generator_lm = generator_lm
        self.judge_lm = judge_lm
        self._schema: Schema | None = None

    def schema(self) -> Schema | None:
        """The full schema (column types for the checks), introspected once, on first need."""
        if self._schema is None:
            try:
                self._schema = self.engine.introspect()
            except EngineError:
                return None
        return self._schema

    def __copy__(self) -> "Handles":
        return self

    def __deepcopy__(self, memo: dict) -> "Handles":
        return self
