"""The baseline: retrieve once, generate once, run it. No judges, no repair, no loop-back."""
from __future__ import annotations

import time

import dspy

from reflect_sql.db.base import Engine
from reflect_sql.errors import require_question
from reflect_sql.lm.accounting import CostMeter
from reflect_sql.programs.answer import make_prediction
from reflect_sql.programs.candidate import Candidate
from reflect_sql.programs.entailment_loop import execute
from reflect_sql.programs.handles import Handles
from reflect_sql.programs.invoke import call_predictor, make_predictor
from reflect_sql.programs.language import QuestionRenderer
from reflect_sql.programs.retriever import ContextProvider, render_examples, retrieve
from reflect_sql.programs.sql_text import clean_sql
from reflect_sql.programs.trace import Trace, TraceStep
from reflect_sql.settings import Settings
from reflect_sql.signatures.sql_generator import GenerateSQL


class SinglePass(dspy.Module):
    def __init__(self, settings: Settings, engine: Engine, retriever: ContextProvider, generator_lm: dspy.BaseLM | None = None):
        super().__init__()
        self.settings = settings
        self.handles = Handles(engine, retriever, generator_lm)
        self.generator = make_predictor(GenerateSQL, settings.generator_max_tokens)
        self.renderer = QuestionRenderer(settings, self.handles)

    def forward(self, question: str, evidence: str = "") -> dspy.Prediction:
        question = require_question(question)
        s = self.settings
        started = time.perf_counter()
        trace = Trace()
        with CostMeter("question") as meter:
            renderings = self.renderer.renderings(question, trace)
            context = retrieve(self.handles.retriever, question, s.k_tables, s.m_columns, evidence, renderings)
            trace.add(TraceStep("retrieval", 0, 0, decision="retrieved once (single pass)",
                                inputs={"query": question, "k": s.k_tables, "m": s.m_columns, "renderings": list(renderings),
                                        "tables": list(context.tables), "columns": len(context.columns)}))
            schema_text = context.render()
            call = call_predictor(
                self.generator, "single_pass.generator", self.handles.generator_lm,
                question=question, evidence=evidence or "", dialect=self.handles.engine.dialect,
                schema_context=schema_text, examples=render_examples(context, schema_text), feedback="",
            )
            sql = clean_sql(call.output.sql) if call.output is not None else ""
            step = trace.add(TraceStep("synthesis.generate", 0, 0, cost=call.cost, rewrite={"sql": sql} if sql else None))
            if not sql:
                step.failure = f"generator failed ({call.failure})" if call.failure else "generator returned no SQL"
                step.decision = "no SQL"
                return make_prediction(None, trace, meter, started, context=context, error=step.failure)
            step.decision = "generated"
            candidate = Candidate(sql=sql, round=0, context=context)
            candidate.result, candidate.execution_error = execute(self.handles.engine, sql, s)
            trace.add(TraceStep("execution", 0, 0, inputs={"sql": sql}, failure=candidate.execution_error,
                                decision="executed" if candidate.result is not None else "execution failed"))
        return make_prediction(candidate, trace, meter, started)
