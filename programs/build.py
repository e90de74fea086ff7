"""``build_program``: the one place that turns settings, an engine and a retriever into a program."""
from __future__ import annotations

import dspy

from reflect_sql.db.base import Engine
from reflect_sql.errors import UserError
from reflect_sql.programs.reflect_sql import ReflectSQL
from reflect_sql.programs.retriever import ContextProvider, SchemaRetriever
from reflect_sql.programs.single_pass import SinglePass
from reflect_sql.settings import Settings

MODES = ("reflect", "single-pass")


def build_program(settings: Settings, engine: Engine, retriever: ContextProvider | None = None, mode: str = "reflect",
                  generator_lm: dspy.BaseLM | None = None, judge_lm: dspy.BaseLM | None = None) -> dspy.Module:
    """A program for ``mode``; without a retriever it serves the whole schema (``SchemaRetriever``).

    With no LMs given, every predictor uses the LM configured in DSPy (``dspy.configure``/``context``);
    a judge LM given alone isolates the judges from the generator (the paper's role isolation).
    """
    if retriever is None:
        retriever = SchemaRetriever(engine.introspect())
    if mode == "reflect":
        return ReflectSQL(settings, engine, retriever, generator_lm=generator_lm, judge_lm=judge_lm)
    if mode == "single-pass":
        return SinglePass(settings, engine, retriever, generator_lm=generator_lm)
    raise UserError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}")
