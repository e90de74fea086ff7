"""reflect_sql.programs: the Reflect-SQL loops as DSPy modules, the single-pass baseline, and
``build_program`` to make either from settings, an engine and a retriever."""
from reflect_sql.programs.answer import prediction_to_json
from reflect_sql.programs.build import MODES, build_program
from reflect_sql.programs.reflect_sql import ReflectSQL
from reflect_sql.programs.retriever import ContextProvider, SchemaRetriever
from reflect_sql.programs.single_pass import SinglePass

__all__ = ["MODES", "ContextProvider", "ReflectSQL", "SchemaRetriever", "SinglePass", "build_program", "prediction_to_json"]
