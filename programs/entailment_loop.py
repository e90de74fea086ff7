"""Loop 3, entailment (paper section 5): run the SQL, check the result deterministically, and let
the judge score E = beta*E_schema + (1-beta)*E_data. Below theta_e, ReflectSQL goes back to the
retrieval loop with the diagnosis this module writes (the loop-back spans all three loops, so it
lives in ReflectSQL; this module is one pass of it).

The deterministic checks feed E_data: an error finding is a measured fact that the result cannot
be the answer, so E_data is set to the bottom of its scale whatever the judge said.
"""
from __future__ import annotations

from typing import Any

from reflect_sql.db.base import ConnectionFailed, Engine, EngineError, QueryResult
from reflect_sql.programs.candidate import Candidate
from reflect_sql.programs.checks import Finding, check_result, execution_findings, has_errors, render_findings
from reflect_sql.programs.handles import Handles
from reflect_sql.programs.invoke import call_predictor, make_judge
from reflect_sql.programs.loop import Loop
from reflect_sql.programs.trace import Trace, TraceStep
from reflect_sql.settings import Settings
from reflect_sql.signatures.entailment_judge import EntailmentChecks, EntailmentJudge
from reflect_sql.signatures.scales import ENTAILMENT_SCALE

# Rows shown to the judge and in feedback: enough to see the shape, few enough for a small context.
PREVIEW_ROWS = 10
PREVIEW_CELL_CHARS = 60


def entailment_score(e_schema: float, e_data: float, settings: Settings) -> float:
    """E = beta * E_schema + (1 - beta) * E_data."""
    return settings.beta * e_schema + (1 - settings.beta) * e_data


def result_preview(result: QueryResult, rows: int = PREVIEW_ROWS) -> str:
    def cell(v: Any) -> str:
        text = "NULL" if v is None else repr(v)
        return text if len(text) <= PREVIEW_CELL_CHARS else text[: PREVIEW_CELL_CHARS - 3] + "..."

    n = len(result.rows)
    head = f"{n} row(s){' (truncated at the row limit)' if result.truncated else ''}; columns: {', '.join(result.columns)}"
    lines = [head] + [" | ".join(cell(v) for v in r) for r in result.rows[:rows]]
    if n > rows:
        lines.append(f"... {n - rows} more row(s)")
    return "\n".join(lines)


def execute(engine: Engine, sql: str, settings: Settings) -> tuple[QueryResult | None, str | None]:
    """Run guarded SQL: (result, None) or (None, "<kind>: <message>"). Refused SQL is never run."""
    try:
        return engine.execute(sql, timeout_s=settings.query_timeout_s, max_rows=settings.max_rows), None
    except ConnectionFailed:
        raise
    except EngineError as exc:
        return None, f"{exc.kind}: {exc.message}"


def schema_context_of(candidate: Candidate) -> str:
    """The context the candidate was written from: the judge reads the same schema, and with the
    shared-head prompt layout the same prompt head, as the generator did."""
    return candidate.context.render() if candidate.context is not None else ""


class EntailmentLoop(Loop):
    def __init__(self, settings: Settings, handles: Handles):
        super().__init__(settings, handles)
        self.judge = make_judge(EntailmentChecks if settings.judge_form == "checks" else EntailmentJudge,
                                settings.entailment_judge_max_tokens, settings)

    def forward(self, question: str, evidence: str, candidate: Candidate, trace: Trace, round: int) -> str:
        """Fill the candidate's result, findings and E; returns the feedback for the next round ("" if it passed)."""
        s = self.settings
        lo = ENTAILMENT_SCALE.low
        step = trace.add(TraceStep("entailment", round, 0, inputs={"sql": candidate.sql}))
        if candidate.result is None and candidate.execution_error is None:
            candidate.result, candidate.execution_error = execute(self.handles.engine, candidate.sql, s)
        # A pool candidate was executed for the vote already: the database is read-only, so its
        # result stands, and a slow query is not paid for twice.
        result, error = candidate.result, candidate.execution_error
        if result is None:
            # Nothing ran, so there is nothing to judge: E sits at the bottom of its scale.
            candidate.findings = [Finding("execution_error", "error", error), *execution_findings(error)]
            candidate.entailment_score = lo
            candidate.entailment = {"E_schema": None, "E_data": lo, "diagnosis": f"the query failed to run: {error}"}
            candidate.passed_entailment = False
            step.scores = {"E": lo, "threshold": s.theta_e}
            step.inputs["checks"] = [f.to_json() for f in candidate.findings]
            step.decision = "back to retrieval: execution failed"
            step.feedback = self._feedback(candidate, None)
            return step.feedback

        # Column types only matter to the integer-division check, so the schema is fetched lazily.
        candidate.findings = check_result(question, candidate.sql, result.columns, result.rows,
                                          schema=self.handles.schema, dialect=self.handles.engine.dialect,
                                          truncated=result.truncated)
        preview = result_preview(result)
        step.inputs.update({"rows": len(result.rows), "checks": [f.to_json() for f in candidate.findings]})
        call = call_predictor(
            self.judge, "entailment.judge", self.handles.judge_lm,
            question=question, evidence=evidence or "", schema_context=schema_context_of(candidate),
            sql=candidate.sql, result_preview=preview, check_findings=render_findings(candidate.findings),
        )
        step.cost, step.retry = call.cost, call.retried
        if call.output is None:
            candidate.entailment_score = None
            candidate.entailment = {"E_schema": None, "E_data": None, "diagnosis": ""}
            candidate.passed_entailment = False
            step.failure = f"entailment judge failed ({call.failure}); treated as not entailed"
        else:
            out = call.output
            e_data = lo if has_errors(candidate.findings) else out.e_data
            candidate.entailment_score = entailment_score(out.e_schema, e_data, s)
            candidate.entailment = {"E_schema": out.e_schema, "E_data": e_data, "E_data_judge": out.e_data, "diagnosis": out.diagnosis}
            candidate.passed_entailment = candidate.entailment_score >= s.theta_e
            step.scores = {"E_schema": out.e_schema, "E_data": e_data, "E_data_judge": out.e_data,
                           "E": candidate.entailment_score, "threshold": s.theta_e}
        if candidate.passed_entailment:
            step.decision = "accept"
            return ""
        step.decision = "back to retrieval with the diagnosis"
        step.feedback = self._feedback(candidate, preview)
        return step.feedback

    def _feedback(self, candidate: Candidate, preview: str | None) -> str:
        score = candidate.entailment_score
        shown = "unknown" if score is None else f"{score:.2f}"
        if preview is None:
            head = "The previous SQL failed when the database ran it:"
        else:
            head = (f"The previous SQL was run and its result does not answer the question "
                    f"(E = {shown} on 1-5, threshold {self.settings.theta_e:g}):")
        lines = [head, candidate.sql]
        if preview is not None:
            lines += ["Result:", preview]
        if candidate.findings:
            lines += ["Check findings:", render_findings(candidate.findings)]
        diagnosis = (candidate.entailment.get("diagnosis") or "").strip()
        if diagnosis and diagnosis.lower().strip(" .") != "none":
            lines.append(f"Diagnosis: {diagnosis}")
        return "\n".join(lines)
