"""Loop 2, synthesis (paper section 4), two nested sub-loops:

- syntax: compile the SQL on the engine (no execution); on an error, the repairer rewrites it from
  the engine's error text, up to ``max_syntax_repairs`` times;
- semantic: the judge scores C, G, J, Q and S = w_c*C + w_g*G + w_j*J + w_q*Q; below theta_s the
  diagnosis goes back to the generator, up to ``max_semantic_iterations`` generations.
"""
from __future__ import annotations

from typing import Any

import dspy

from reflect_sql.db.base import ConnectionFailed, Engine, EngineError, QueryRefused
from reflect_sql.programs.candidate import Candidate, better, synthesis_rank
from reflect_sql.programs.handles import Handles
from reflect_sql.programs.invoke import call_predictor, make_predictor
from reflect_sql.programs.retriever import render_examples
from reflect_sql.programs.sql_text import clean_sql
from reflect_sql.programs.trace import Trace, TraceStep
from reflect_sql.settings import Settings
from reflect_sql.signatures.semantic_judge import SemanticJudge
from reflect_sql.signatures.sql_generator import GenerateSQL
from reflect_sql.signatures.syntax_repairer import RepairSQL

# (score field, rationale field, weight setting, label) for the four semantic criteria.
CRITERIA = (
    ("column_consistency", "column_rationale", "w_c", "C"),
    ("granularity", "granularity_rationale", "w_g", "G"),
    ("join_consistency", "join_rationale", "w_j", "J"),
    ("query_logic", "logic_rationale", "w_q", "Q"),
)


def semantic_score(scores: dict[str, float], settings: Settings) -> float:
    """S = w_c*C + w_g*G + w_j*J + w_q*Q, with scores keyed by label ("C", "G", "J", "Q")."""
    return sum(getattr(settings, weight) * scores[label] for _, _, weight, label in CRITERIA)


def compile_error(engine: Engine, sql: str) -> str | None:
    """The engine's compile error as text, or None. A guard refusal is an error like any other here:
    it goes back to the model and the SQL never runs. A lost connection is not the model's fault."""
    try:
        return engine.check(sql)
    except QueryRefused as exc:
        return f"refused: {exc.message}"
    except ConnectionFailed:
        raise
    except EngineError as exc:
        return f"{exc.kind}: {exc.message}"


def join_feedback(*parts: str | None) -> str:
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


class SynthesisLoop(dspy.Module):
    def __init__(self, settings: Settings, handles: Handles):
        super().__init__()
        self.settings = settings
        self.handles = handles
        self.generator = make_predictor(GenerateSQL, settings.generator_max_tokens)
        self.repairer = make_predictor(RepairSQL, settings.repairer_max_tokens)
        self.judge = make_predictor(SemanticJudge, settings.semantic_judge_max_tokens)

    def forward(self, question: str, evidence: str, context: Any, retrieval_score: float | None,
                feedback: str, trace: Trace, round: int) -> Candidate | None:
        """The first candidate that passes, or the best one when the cap is hit (None if no SQL at all)."""
        s = self.settings
        iterations = s.max_semantic_iterations if s.use_semantic_reflection else 1
        schema_text = context.render()
        examples = render_examples(context, schema_text)
        best: Candidate | None = None
        note = ""  # what this round's previous generation got wrong
        seen: set[str] = set()  # SQL already judged in this round
        for it in range(iterations):
            prompt_feedback = join_feedback(feedback, note)
            call = call_predictor(
                self.generator, "synthesis.generator", self.handles.generator_lm,
                question=question, evidence=evidence or "", dialect=self.handles.engine.dialect,
                schema_context=schema_text, examples=examples, feedback=prompt_feedback,
            )
            sql = clean_sql(call.output.sql) if call.output is not None else ""
            step = trace.add(TraceStep(
                "synthesis.generate", round, it,
                inputs={"feedback": prompt_feedback or None}, cost=call.cost, rewrite={"sql": sql} if sql else None,
            ))
            if not sql:
                step.failure = f"generator failed ({call.failure})" if call.failure else "generator returned no SQL"
                step.decision = "regenerate" if it < iterations - 1 else "cap reached"
                note = "The previous attempt did not produce a SQL query. Answer with one SQL query only."
                continue
            step.decision = "generated"

            candidate = Candidate(sql=sql, round=round, context=context, retrieval_score=retrieval_score)
            if s.use_syntax_reflection:
                self._syntax(candidate, question, evidence, schema_text, trace, round, it)
            if candidate.sql in seen:
                # The judge sees only the SQL, so it would repeat its verdict, the feedback would repeat,
                # and so would the generator: a fixed point, not progress.
                step.decision = "repeated an earlier SQL of this round: stop regenerating"
                break
            seen.add(candidate.sql)
            if candidate.compiles is False:
                best = better(best, candidate, synthesis_rank)
                note = (f"The previous SQL did not compile, even after repair:\n{candidate.sql}\n"
                        f"Engine error: {candidate.compile_error}")
                continue
            if not s.use_semantic_reflection:
                return candidate

            note = self._judge(candidate, question, evidence, schema_text, trace, round, it, iterations)
            if candidate.passed_semantic:
                return candidate
            best = better(best, candidate, synthesis_rank)
        return best

    def _syntax(self, candidate: Candidate, question: str, evidence: str, schema_text: str, trace: Trace, round: int,
                generation: int) -> None:
        s = self.settings
        for attempt in range(s.max_syntax_repairs + 1):
            error = compile_error(self.handles.engine, candidate.sql)
            step = trace.add(TraceStep("synthesis.syntax", round, attempt, inputs={"generation": generation, "sql": candidate.sql}))
            if error is None:
                candidate.compiles, candidate.compile_error = True, None
                step.decision = "compiles"
                return
            candidate.compiles, candidate.compile_error = False, error
            step.feedback = error
            if attempt == s.max_syntax_repairs:
                step.decision = f"cap reached ({s.max_syntax_repairs} repairs): still fails to compile"
                return
            call = call_predictor(
                self.repairer, "synthesis.repairer", self.handles.generator_lm,
                question=question, evidence=evidence or "", dialect=self.handles.engine.dialect, schema_context=schema_text,
                sql=candidate.sql, error=error,
            )
            step.cost = call.cost
            repaired = clean_sql(call.output.repaired_sql) if call.output is not None else ""
            if not repaired:
                step.failure = f"repairer failed ({call.failure})" if call.failure else "repairer returned no SQL"
                step.decision = "repair failed; compile again"
                continue
            step.rewrite = {"sql": repaired}
            if repaired == candidate.sql:
                # Same SQL, same error, same repair prompt: more attempts would only repeat this one.
                step.decision = "repairer returned the same SQL: stop repairing"
                return
            step.decision = "repair"
            candidate.sql = repaired

    def _judge(self, candidate: Candidate, question: str, evidence: str, schema_text: str,
               trace: Trace, round: int, it: int, iterations: int) -> str:
        """Score the candidate; returns the feedback for the next generation ("" when it passed)."""
        s = self.settings
        call = call_predictor(
            self.judge, "synthesis.judge", self.handles.judge_lm,
            question=question, evidence=evidence or "", schema_context=schema_text, sql=candidate.sql,
        )
        step = trace.add(TraceStep("synthesis.semantic", round, it, inputs={"sql": candidate.sql}, cost=call.cost,
                                   retry=call.retried))
        last = it == iterations - 1
        if call.output is None:
            candidate.passed_semantic = False
            step.failure = f"semantic judge failed ({call.failure}); treated as below threshold"
            step.decision = "cap reached" if last else "regenerate"
            return (f"The previous SQL could not be verified:\n{candidate.sql}\n"
                    "Re-check it against the question and the schema context.")
        out = call.output
        labels = {label: getattr(out, field) for field, _, _, label in CRITERIA}
        rationales = {label: getattr(out, rationale) for _, rationale, _, label in CRITERIA}
        candidate.semantic_score = semantic_score(labels, s)
        candidate.semantic = {"scores": labels, "rationales": rationales, "diagnosis": out.diagnosis}
        candidate.passed_semantic = candidate.semantic_score >= s.theta_s
        step.scores = {**labels, "S": candidate.semantic_score, "threshold": s.theta_s, "rationales": rationales}
        if candidate.passed_semantic:
            step.decision = "accept"
            return ""
        step.decision = f"cap reached ({iterations} generations): keep the best candidate" if last else "regenerate with the diagnosis"
        lines = [f"A reviewer judged the previous SQL semantically wrong (S = {candidate.semantic_score:.2f} on 1-10, "
                 f"threshold {s.theta_s:g}):", candidate.sql]
        for field, rationale, _, label in CRITERIA:
            lines.append(f"- {field.replace('_', ' ')} {labels[label]}/10: {rationales[label]}")
        lines.append(f"Diagnosis: {out.diagnosis}")
        step.feedback = "\n".join(lines)
        return step.feedback
