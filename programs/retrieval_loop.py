"""Loop 1, retrieval (paper section 3): retrieve, judge the context, and when Score_r < theta_r
rewrite the question (Q -> Q') and widen k and m, until the context suffices or the cap is hit."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reflect_sql.kb.context import WHOLE_DATABASE
from reflect_sql.programs.invoke import call_predictor, make_judge
from reflect_sql.programs.loop import Loop
from reflect_sql.programs.sql_text import reads_as_sql
from reflect_sql.programs.handles import Handles
from reflect_sql.programs.retriever import retrieve
from reflect_sql.programs.trace import Trace, TraceStep
from reflect_sql.settings import Settings
from reflect_sql.signatures.retrieval_judge import RetrievalJudge


VERDICT_KEPT = "; same context as last judged: its verdict reused, no LM call"


def retrieval_score(relevance: float, completeness: float, settings: Settings) -> float:
    """Score_r = alpha * R + (1 - alpha) * C."""
    return settings.alpha * relevance + (1 - settings.alpha) * completeness


@dataclass
class RetrievalState:
    """What widening changes; it persists when entailment sends the pipeline back to this loop."""

    query: str
    k: int
    m: int
    renderings: tuple[str, ...] = ()  # the question said in English, when it was asked in another language


@dataclass
class RetrievalOutcome:
    context: Any
    score: float | None  # None when not judged (loop off) or the judge failed
    query: str
    k: int
    m: int


class RetrievalLoop(Loop):
    def __init__(self, settings: Settings, handles: Handles):
        super().__init__(settings, handles)
        self.judge = make_judge(RetrievalJudge, settings.retrieval_judge_max_tokens, settings)

    def forward(self, question: str, evidence: str, state: RetrievalState, diagnosis: str, trace: Trace, round: int) -> RetrievalOutcome:
        s = self.settings
        iterations = s.max_retrieval_iterations if s.use_retrieval_loop else 1
        best: RetrievalOutcome | None = None
        judged: tuple[str, Any] | None = None  # (a context rendered, the judge's usable verdict on it)
        for it in range(iterations):
            context = retrieve(self.handles.retriever, state.query, state.k, state.m, evidence, state.renderings)
            step = trace.add(TraceStep(
                "retrieval", round, it,
                inputs={"query": state.query, "k": state.k, "m": state.m, "diagnosis": diagnosis or None,
                        "tables": list(context.tables), "columns": len(context.columns)},
            ))
            outcome = RetrievalOutcome(context, None, state.query, state.k, state.m)
            if not s.use_retrieval_loop:
                step.decision = "retrieved once (retrieval loop off)"
                return outcome
            if getattr(context, "pruned", None) == WHOLE_DATABASE:
                # Neither a rewrite nor a wider k and m can add to the whole database: the judge's
                # verdict could change nothing, so it is not asked.
                step.decision = "accept: the whole database fits the context budget"
                return outcome

            rendered = context.render()
            reused = judged is not None and judged[0] == rendered
            if reused:
                # Widening (or the rewrite) found nothing new, and question, evidence and diagnosis are
                # fixed for this call: the judge would read the same prompt again. Under the defaults
                # (temperature 0, the response cache on) it would give the same reply; at a higher
                # temperature, another sample of the same judgment is not worth a model call.
                call = judged[1]
            else:
                call = call_predictor(
                    self.judge, "retrieval.judge", self.handles.judge_lm,
                    question=question, evidence=evidence or "", schema_context=rendered, diagnosis=diagnosis or "",
                )
                step.cost, step.retry = call.cost, call.retried
                # A failure (a timeout, a reply that contradicts itself) is not a verdict: asked again.
                judged = (rendered, call) if call.output is not None else None
            kept = VERDICT_KEPT if reused else ""
            rewritten = ""
            if call.output is None:
                step.failure = f"retrieval judge failed ({call.failure}); treated as insufficient"
            else:
                out = call.output
                outcome.score = retrieval_score(out.relevance, out.completeness, s)
                rewritten = (out.rewritten_question or "").strip()
                step.scores = {"R": out.relevance, "C": out.completeness, "score": outcome.score, "threshold": s.theta_r}
                step.feedback = "; ".join(out.missing_aspects or []) or None
            if best is None or (outcome.score if outcome.score is not None else float("-inf")) >= (
                best.score if best.score is not None else float("-inf")
            ):
                best = outcome  # ties go to the wider context

            if outcome.score is not None and outcome.score >= s.theta_r:
                step.decision = "accept"
                return outcome
            if it == iterations - 1:
                step.decision = f"cap reached ({iterations} iterations): keep the best context (score {best.score})" + kept
                return best
            if reads_as_sql(rewritten):
                step.failure = "the judge's rewritten question was SQL, not a question: kept the query"
                rewritten = ""
            rewrites = bool(rewritten) and rewritten != state.query
            state.query = rewritten or state.query
            state.k += s.k_growth
            state.m += s.m_growth
            step.decision = ("rewrite and widen" if rewrites else "widen (query kept)") + kept
            step.rewrite = {"query": state.query, "k": state.k, "m": state.m}
        raise AssertionError("unreachable: the loop returns on its last iteration")
