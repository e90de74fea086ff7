"""Loop 2, synthesis (paper section 4), two nested sub-loops:

- syntax: compile the SQL on the engine (no execution); on an error, schema-grounded repair
  (``schema_repair.py``) first fixes what the schema alone decides and adds what it found to the
  error text, then the repairer rewrites the SQL from that text, up to ``max_syntax_repairs`` times;
- semantic: the judge scores C, G, J, Q and S = w_c*C + w_g*G + w_j*J + w_q*Q; below theta_s the
  diagnosis goes back to the generator, up to ``max_semantic_iterations`` generations. With
  ``check_evidence_columns``, SQL that ignores an evidence clause (``evidence_columns.py``) goes back
  first, with those clauses and without a judge call.
"""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from reflect_sql.db.base import ConnectionFailed, Engine, EngineError, QueryRefused
from reflect_sql.programs.candidate import Candidate, CandidatePool, better, synthesis_rank
from reflect_sql.programs.handles import Handles
from reflect_sql.programs.invoke import call_predictor, make_judge, make_predictor
from reflect_sql.programs.judgment import RUBRICS
from reflect_sql.programs.loop import Loop
from reflect_sql.programs.retriever import render_examples
from reflect_sql.programs import evidence_columns, schema_repair
from reflect_sql.programs.sql_text import clean_sql
from reflect_sql.programs.trace import Trace, TraceStep
from reflect_sql.settings import Settings
from reflect_sql.signatures.semantic_judge import SemanticChecks, SemanticJudge
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


def _answered(out: Any, score_field: str) -> str:
    question = RUBRICS["SemanticChecks"].checks[score_field]
    return f"{question.replace('_', ' ')}: {getattr(out, question, None)}"


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


@dataclass
class Generation:
    """One generation step: the SQL it ends with, and the calls it took to get there."""

    sql: str = ""
    failure: str | None = None
    cost: dict[str, Any] = field(default_factory=dict)
    repeats: int = 0
    samples: int = 0
    fresh: bool = False  # the SQL is new to the question

    def take(self, call) -> None:
        self.sql = clean_sql(call.output.sql) if call.output is not None else ""
        self.failure = call.failure
        for key, value in call.cost.items():
            self.cost[key] = round(self.cost.get(key, 0) + value, 4) if isinstance(value, float) else self.cost.get(key, 0) + value


def join_feedback(*parts: str | None) -> str:
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


class SynthesisLoop(Loop):
    def __init__(self, settings: Settings, handles: Handles):
        super().__init__(settings, handles)
        self.generator = make_predictor(GenerateSQL, settings.generator_max_tokens)
        self.repairer = make_predictor(RepairSQL, settings.repairer_max_tokens)
        self.judge = make_judge(SemanticChecks if settings.judge_form == "checks" else SemanticJudge,
                                settings.semantic_judge_max_tokens, settings)

    def forward(self, question: str, evidence: str, context: Any, retrieval_score: float | None,
                feedback: str, trace: Trace, round: int, pool: CandidatePool | None = None) -> Candidate | None:
        """The first candidate that passes, or the best one when the cap is hit (None if no SQL at all).

        Every candidate that compiles goes into ``pool``, the question's candidate pool."""
        s = self.settings
        pool = pool if pool is not None else CandidatePool()
        iterations = s.max_semantic_iterations if s.use_semantic_reflection else 1
        schema_text = context.render()
        examples = render_examples(context, schema_text)
        best: Candidate | None = None
        note = ""  # what this round's previous generation got wrong
        seen: set[str] = set()  # SQL already judged in this round
        for it in range(iterations):
            prompt_feedback = join_feedback(feedback, note)
            inputs = dict(question=question, evidence=evidence or "", dialect=self.handles.engine.dialect,
                          schema_context=schema_text, examples=examples, feedback=prompt_feedback)
            generation = self._generate(inputs, pool)
            sql = generation.sql
            step = trace.add(TraceStep(
                "synthesis.generate", round, it, inputs={"feedback": prompt_feedback or None}, cost=generation.cost,
                rewrite={"sql": sql} if sql else None,
                scores={k: v for k, v in (("repeats", generation.repeats), ("samples", generation.samples)) if v},
            ))
            if round == 0 and it == 0 and s.n_candidates > 1:
                self._extra_samples(inputs, pool, context, retrieval_score, trace)
            if not sql:
                step.failure = (f"generator failed ({generation.failure})" if generation.failure
                                else "generator returned no SQL")
                step.decision = "regenerate" if it < iterations - 1 else "cap reached"
                note = "The previous attempt did not produce a SQL query. Answer with one SQL query only."
                continue
            step.decision = "generated" if not generation.repeats else (
                f"generated after {generation.repeats} repeat(s)" if pool.is_new(sql) or generation.fresh
                else f"repeated earlier SQL {generation.repeats} time(s)")
            pool.remember(sql)

            candidate = Candidate(sql=sql, round=round, context=context, retrieval_score=retrieval_score)
            if s.use_syntax_reflection:
                self._syntax(candidate, question, evidence, schema_text, trace, round, it)
                if candidate.context is not context:  # schema repair pulled in a table: later generations see it
                    context = candidate.context
                    schema_text = context.render()
                    examples = render_examples(context, schema_text)
            if candidate.sql in seen:
                # The judge sees only the SQL, so it would repeat its verdict, the feedback would repeat,
                # and so would the generator: a fixed point, not progress.
                step.decision = "repeated an earlier SQL of this round: stop regenerating"
                break
            seen.add(candidate.sql)
            pool.add(candidate)
            if candidate.compiles is False:
                best = better(best, candidate, synthesis_rank)
                note = (f"The previous SQL did not compile, even after repair:\n{candidate.sql}\n"
                        f"Engine error: {candidate.compile_error}")
                continue
            if not s.use_semantic_reflection:
                return candidate

            if s.check_evidence_columns:
                note = self._check_evidence(candidate, evidence, trace, round, it, last=it == iterations - 1)
                if note:
                    best = better(best, candidate, synthesis_rank)
                    continue
            note = self._judge(candidate, question, evidence, schema_text, trace, round, it, iterations)
            if candidate.passed_semantic:
                return candidate
            best = better(best, candidate, synthesis_rank)
        return best

    def _generate(self, inputs: dict[str, Any], pool: CandidatePool) -> "Generation":
        """SQL for ``inputs`` that the question has not produced yet, if the model can be moved to write one.

        A prompt already sent is never sent again as it was: its reply is known (and cached). Instead,
        and whenever a reply repeats SQL of this question, the generator samples, at
        ``resample_temperature`` with a fresh rollout id each time (which also keeps each sample's
        cache and cassette entry apart), up to ``max_resamples`` times."""
        s = self.settings
        out = Generation()
        key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode("utf-8")).hexdigest()
        if key not in pool.prompts:
            pool.prompts.add(key)
            out.take(call_predictor(self.generator, "synthesis.generator", self.handles.generator_lm, **inputs))
            if not out.sql:
                return out  # a failed call or a reply without SQL: the loop's note asks again, sampling would not help
            if pool.is_new(out.sql):
                out.fresh = True
                return out
            out.repeats += 1
        for _ in range(s.max_resamples):
            out.samples += 1
            out.take(self._sample(inputs, pool))
            if out.sql and pool.is_new(out.sql):
                out.fresh = True
                break
            out.repeats += bool(out.sql)
        pool.repeats += out.repeats
        return out

    def _sample(self, inputs: dict[str, Any], pool: CandidatePool):
        """One sampled generation: its own rollout id, which is also its seed, so a rerun draws the
        same sample and the cache and cassettes keep each sample apart."""
        pool.samples += 1
        config = {"temperature": self.settings.resample_temperature, "rollout_id": pool.samples, "seed": pool.samples}
        return call_predictor(self.generator, "synthesis.generator", self.handles.generator_lm, config=config, **inputs)

    def _extra_samples(self, inputs: dict[str, Any], pool: CandidatePool, context: Any, retrieval_score: float | None,
                       trace: Trace) -> None:
        """``n_candidates - 1`` more samples of the first prompt: they share its prefix, so they cost
        little more than their completion tokens. Each is compiled (after the schema-grounded rewrites,
        which need no LM call) and, if it compiles, joins the pool."""
        s = self.settings
        for k in range(1, s.n_candidates):
            call = self._sample(inputs, pool)
            sql = clean_sql(call.output.sql) if call.output is not None else ""
            step = trace.add(TraceStep("synthesis.sample", 0, k, cost=call.cost, rewrite={"sql": sql} if sql else None))
            if not sql:
                step.failure = f"generator failed ({call.failure})" if call.failure else "generator returned no SQL"
                step.decision = "no SQL"
                continue
            if not pool.is_new(sql):
                pool.repeats += 1
                step.decision = "repeat: dropped"
                continue
            pool.remember(sql)
            candidate = Candidate(sql=sql, round=0, context=context, retrieval_score=retrieval_score)
            error = compile_error(self.handles.engine, sql)
            # The schema's own fixes cost no LM call; an extra sample gets no LM repair.
            if error is not None and self._schema_repair(candidate, error, trace, 0, k) is None:
                error = compile_error(self.handles.engine, candidate.sql)
                step.rewrite = {"sql": candidate.sql}
            candidate.compiles, candidate.compile_error = error is None, error
            step.feedback = error
            pool.add(candidate)
            step.decision = "compiles: added to the pool" if error is None else "does not compile: dropped"

    def _syntax(self, candidate: Candidate, question: str, evidence: str, schema_text: str, trace: Trace, round: int,
                generation: int) -> None:
        s = self.settings
        grounded: set[str] = set()  # SQL schema repair has looked at: once each, so its rewrites cannot cycle
        repairs = 0
        for check in itertools.count():
            error = compile_error(self.handles.engine, candidate.sql)
            step = trace.add(TraceStep("synthesis.syntax", round, check, inputs={"generation": generation, "sql": candidate.sql}))
            if error is None:
                candidate.compiles, candidate.compile_error = True, None
                step.decision = "compiles"
                return
            candidate.compiles, candidate.compile_error = False, error
            step.feedback = error
            lm_error = error
            if candidate.sql not in grounded:
                grounded.add(candidate.sql)
                before = candidate.context
                lm_error = self._schema_repair(candidate, error, trace, round, generation)
                if candidate.context is not before:
                    schema_text = candidate.context.render()
                if lm_error is None:
                    step.decision = "schema repair rewrote it: compile again"
                    continue
            if repairs == s.max_syntax_repairs:
                step.decision = f"cap reached ({s.max_syntax_repairs} repairs): still fails to compile"
                return
            repairs += 1
            call = call_predictor(
                self.repairer, "synthesis.repairer", self.handles.generator_lm,
                question=question, evidence=evidence or "", dialect=self.handles.engine.dialect, schema_context=schema_text,
                sql=candidate.sql, error=lm_error,
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

    def _schema_repair(self, candidate: Candidate, error: str, trace: Trace, round: int, generation: int) -> str | None:
        """Schema-grounded repair of SQL that failed with ``error``. Rewrites ``candidate.sql`` and
        returns None when the rules fixed something the schema decides (compile again, no LM call);
        otherwise returns the error text for the repairer, with what the rules found appended. May
        give ``candidate`` a wider context. Never fails the loop: the engine's error always remains."""
        s = self.settings
        if not schema_repair.enabled(s):
            return error
        step = TraceStep("synthesis.schema_repair", round, generation, inputs={"sql": candidate.sql})
        try:
            schema = self.handles.schema()
            if schema is None:
                step.failure = "no schema (introspection failed): the repairer gets the engine's error alone"
                trace.add(step)
                return error
            retriever = self.handles.retriever
            kb = getattr(retriever, "kb", None)
            outcome = schema_repair.repair(candidate.sql, error, schema, s, self.handles.engine.dialect,
                                           foreign_keys=getattr(kb, "foreign_keys", None),
                                           values=getattr(retriever, "values", None),
                                           meaning=getattr(retriever, "columns_meaning", None))
            if outcome is None or not (outcome.rewrites or outcome.notes):
                return error
            extend = getattr(retriever, "extend", None)
            if outcome.pull and callable(extend) and candidate.context is not None:
                candidate.context = extend(candidate.context, outcome.pull)
        except ConnectionFailed:
            raise
        except Exception as exc:  # a rule's bug must not cost the question its LM repair
            step.failure = f"schema repair failed ({type(exc).__name__}: {exc}): the repairer gets the engine's error alone"
            trace.add(step)
            return error
        trace.add(step)
        step.feedback = outcome.feedback() or None
        if outcome.pull:
            step.inputs["pulled_tables"] = list(outcome.pull)
        if outcome.rewrites and outcome.sql != candidate.sql:
            step.rewrite = {"sql": outcome.sql, "changes": outcome.rewrites}
            step.decision = "rewrote: " + "; ".join(outcome.rewrites)
            candidate.sql = outcome.sql
            return None
        step.decision = f"feedback for the repairer ({', '.join(outcome.rules)})"
        return join_feedback(error, outcome.feedback())

    def _check_evidence(self, candidate: Candidate, evidence: str, trace: Trace, round: int, it: int, last: bool) -> str:
        """The generator's feedback when the SQL ignores an evidence clause ("" when it uses them all,
        and on the last generation, where the judge decides: no generation is left to correct it)."""
        schema = self.handles.schema()
        if schema is None or not evidence:
            return ""
        unused = evidence_columns.unused_clauses(candidate.sql, evidence, schema, self.handles.engine.dialect)
        candidate.evidence_unused = len(unused)
        if not unused:
            return ""
        step = trace.add(TraceStep("synthesis.evidence", round, it, inputs={"sql": candidate.sql},
                                   scores={"unused_clauses": len(unused)}))
        step.feedback = evidence_columns.feedback(candidate.sql, unused)
        if last:
            step.decision = "last generation: the judge decides"
            return ""
        step.decision = "regenerate with the unused evidence (no judge call)"
        return step.feedback

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
        # The checks form has no rationales: its True/False answers stand in their place.
        checks_form = self.settings.judge_form == "checks"
        rationales = {label: _answered(out, field) if checks_form else getattr(out, rationale)
                      for field, rationale, _, label in CRITERIA}
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
