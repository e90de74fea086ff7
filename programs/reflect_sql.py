"""ReflectSQL: the three loops composed (paper sections 3-5).

    round r:  retrieval loop  ->  synthesis loop  ->  entailment
              ^                                        |
              +---- E < theta_e: diagnosis ------------+   (at most max_entailment_iterations rounds)

On success (every judge at or above its threshold and no check finding: ``programs/verification.py``)
the verified answer goes to KB enrichment. When a cap is hit the best candidate so far is returned
with its scores, never nothing. Each ablation switch in settings removes exactly its loop.
"""
from __future__ import annotations

import time
from typing import Any

import dspy

from reflect_sql.db.base import Engine
from reflect_sql.errors import require_question
from reflect_sql.lm.accounting import CostMeter
from reflect_sql.programs.answer import make_prediction
from reflect_sql.programs.candidate import Candidate, CandidatePool, better
from reflect_sql.programs.enrichment import enrich
from reflect_sql.programs.entailment_loop import EntailmentLoop, execute
from reflect_sql.programs.handles import Handles
from reflect_sql.programs.invoke import cost_of
from reflect_sql.programs.language import QuestionRenderer
from reflect_sql.programs.retrieval_loop import RetrievalLoop, RetrievalState
from reflect_sql.programs.retriever import ContextProvider
from reflect_sql.programs.selection import groups, result_digest, select
from reflect_sql.programs.synthesis_loop import SynthesisLoop
from reflect_sql.programs.trace import Trace, TraceStep, json_safe
from reflect_sql.programs.verification import fully_verified
from reflect_sql.settings import Settings


class ReflectSQL(dspy.Module):
    def __init__(self, settings: Settings, engine: Engine, retriever: ContextProvider,
                 generator_lm: dspy.BaseLM | None = None, judge_lm: dspy.BaseLM | None = None):
        super().__init__()
        self.settings = settings
        self.handles = Handles(engine, retriever, generator_lm, judge_lm)
        self.renderer = QuestionRenderer(settings, self.handles)
        self.retrieval_loop = RetrievalLoop(settings, self.handles)
        self.synthesis_loop = SynthesisLoop(settings, self.handles)
        self.entailment_loop = EntailmentLoop(settings, self.handles)

    def forward(self, question: str, evidence: str = "") -> dspy.Prediction:
        question = require_question(question)
        started = time.perf_counter()
        trace = Trace()
        with CostMeter("question") as meter:
            final, context, success = self._rounds(question, evidence or "", trace)
            if success:
                self._enrich(question, evidence or "", final, trace)
            elif self.settings.use_enrichment and final is not None:
                why = "the answer did not pass every check" if self.settings.use_entailment else "entailment off, nothing verified"
                trace.add(TraceStep("enrichment", final.round, 0, decision=f"skipped: {why}"))
        return make_prediction(final, trace, meter, started, context=context,
                               error=None if final is not None else "no SQL could be generated")

    def _rounds(self, question: str, evidence: str, trace: Trace) -> tuple[Candidate | None, Any, bool]:
        """The loops, then the choice over the question's candidate pool (setting ``selection``). Only
        the candidate that passed every check is verified: another one chosen by a vote is not."""
        s = self.settings
        pool = CandidatePool()
        final, context, success = self._loops(question, evidence, trace, pool)
        if s.selection == "paper":
            return final, context, success
        if final is not None:
            pool.adopt(final)
        for c in pool.candidates:
            if c.result is None and c.execution_error is None:
                c.result, c.execution_error = execute(self.handles.engine, c.sql, s)
        if s.judge_pool and s.use_entailment:
            self._judge_groups(question, evidence, pool, trace)
        chosen, detail = select(pool.candidates, s)
        chosen = chosen or final
        kept = chosen is final
        trace.add(TraceStep("selection", chosen.round if chosen is not None else 0, 0,
                            inputs={"sql": chosen.sql if chosen is not None else None,
                                    # Every candidate the rule chose among: what a study of selection
                                    # needs to tell a bad rule from a pool with no right answer in it.
                                    "pool": [{"sql": c.sql, "result": result_digest(c), "semantic": c.semantic_score,
                                              "entailment": c.entailment_score} for c in pool.candidates]},
                            scores={**detail, "repeats": pool.repeats, "samples": pool.samples},
                            decision=("kept the loops' answer" if kept else "chose another candidate of the pool")))
        return chosen, (chosen.context if chosen is not None and chosen.context is not None else context), success and kept

    def _judge_groups(self, question: str, evidence: str, pool: CandidatePool, trace: Trace) -> None:
        """E for every result group the loops left unjudged: its best candidate is judged as the
        entailment loop judges, and the verdict serves selection only (nothing loops back)."""
        for group in groups(pool.candidates):
            if all(c.entailment_score is None for c in group.members):
                representative, at = group.best, len(trace.steps)
                self.entailment_loop(question=question, evidence=evidence, candidate=representative, trace=trace,
                                     round=representative.round)
                step = next(st for st in trace.steps[at:] if st.loop == "entailment")
                step.decision, step.feedback = f"judged for selection ({len(group.members)} agreeing candidate(s))", None

    def _loops(self, question: str, evidence: str, trace: Trace, pool: CandidatePool) -> tuple[Candidate | None, Any, bool]:
        s = self.settings
        renderings = self.renderer.renderings(question, trace)
        state = RetrievalState(question, s.k_tables, s.m_columns, renderings)
        rounds = s.max_entailment_iterations if s.use_entailment else 1
        best: Candidate | None = None
        context = None
        feedback = ""
        judged: dict[str, int] = {}  # SQL already executed and judged -> its round
        for rnd in range(rounds):
            retrieved = self.retrieval_loop(question=question, evidence=evidence, state=state, diagnosis=feedback,
                                            trace=trace, round=rnd)
            context = retrieved.context
            candidate = self.synthesis_loop(question=question, evidence=evidence, context=context,
                                            retrieval_score=retrieved.score, feedback=feedback, trace=trace, round=rnd,
                                            pool=pool)
            if candidate is None:
                feedback = "The previous round produced no SQL query at all. Answer with one SQL query."
                continue
            if not s.use_entailment:
                candidate.result, candidate.execution_error = execute(self.handles.engine, candidate.sql, s)
                trace.add(TraceStep("execution", rnd, 0, inputs={"sql": candidate.sql}, failure=candidate.execution_error,
                                    decision="executed (entailment off)" if candidate.result is not None else "execution failed"))
                self._conclude(trace, candidate, "done (entailment off)")
                return candidate, context, False
            if candidate.sql in judged:
                # Same SQL, same result, same checks, same judge inputs: judging it again cannot change
                # the verdict, and the generator has shown it will not move.
                self._conclude(trace, best, f"the generator repeated the SQL rejected in round {judged[candidate.sql]}: "
                                            "stop and return the best candidate")
                return best, context, False
            judged[candidate.sql] = rnd
            feedback = self.entailment_loop(question=question, evidence=evidence, candidate=candidate, trace=trace, round=rnd)
            best = better(best, candidate)
            if candidate.passed_entailment:
                success = fully_verified(candidate, s)
                self._conclude(trace, candidate, "success" if success else "entailed, but a check or judge fell short")
                return candidate, context, success
        self._conclude(trace, best, f"cap reached ({rounds} rounds): returning the best candidate")
        return best, context, False

    def _conclude(self, trace: Trace, c: Candidate | None, decision: str) -> None:
        scores = c.scores() if c is not None else {}
        trace.add(TraceStep("result", c.round if c is not None else 0, 0, decision=decision,
                            inputs={"sql": c.sql if c is not None else None}, scores=scores))

    def _enrich(self, question: str, evidence: str, c: Candidate, trace: Trace) -> None:
        step = trace.add(TraceStep("enrichment", c.round, 0, inputs={"sql": c.sql}))
        if not self.settings.use_enrichment:
            step.decision = "skipped: enrichment off"
            return
        meter = CostMeter("enrichment")
        try:
            with meter:
                step.decision, outcome = enrich(self.handles.retriever, question, evidence, c, self.settings)
        except Exception as exc:  # a failed enrichment must not cost the user the answer
            step.failure = f"{type(exc).__name__}: {exc}"
            step.decision = "enrichment failed"
        else:
            step.rewrite = json_safe(outcome) if outcome is not None else None
            if step.decision == "refused by the KB":
                step.failure = "; ".join(map(str, (outcome or {}).get("reasons", []))) or None
        step.cost = cost_of(meter)
