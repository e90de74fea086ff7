"""``reflect-sql judge-scale``: how should a judge ask for its scores so that a small model uses the scale?

Each *form* is the shipped judge signature with one thing changed in how the scores are asked for;
every form judges the same labelled cases (gold SQL = right, gold with one injected mistake that
changes the result = wrong; ``labelled.judge_cases``) with the bare signature: no demos, no retry.
What is measured per judge and form:

- AUC of the judge's combined score (S with the configured weights, E with beta) against the label;
- agreement of its decision at the threshold (S >= theta_s, E >= theta_e) with the label;
- the share of replies with every score at the bottom of its scale (the defect this measures:
  with ``Literal[1..10]`` the embedded models copy the first option, 1, into every field);
- unparsable or off-scale replies, and the LM seconds.

Forms:
- ``literal``: the old fields and wording, ``Literal[1, ..., 10]``, rendered by DSPy as a list of options;
- ``int``: the shipped fields, an integer "from 1 (...) to 10 (...)" with worded anchors;
- ``words``: each score as one of five words (wrong ... right), mapped evenly onto the scale;
- ``verdict_first``: the ``int`` fields after a first output field, a yes/no verdict;
- ``flipped``: the ``int`` fields with the other order of score and rationale (the semantic judge
  scores before it explains; the entailment judge explains each score before it);
- ``checks``: no rationales and no numbers: each criterion is a True/False question, answered first
  (a true answer is the top of its score's scale, a false one the bottom), then the diagnosis; the
  shipped signatures of ``judge_form: checks`` (``SemanticChecks``, ``EntailmentChecks``);
- ``verdict``: one True/False question for the whole judgment ("is it right on every criterion?"),
  standing for every score, then the diagnosis.

The yes/no forms cost a few completion tokens instead of a rationale per score, and under
``judge_scores: expected`` each answer is read as the probability of True at its first token
(``programs/expected_score.py``), placed on the score's scale.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Literal

import dspy

from reflect_sql.errors import UserError
from reflect_sql.experiments.calibration import auc
from reflect_sql.experiments.pipeline import PipelineFactory
from reflect_sql.optimize import labelled
from reflect_sql.optimize.compile import train_questions
from reflect_sql.optimize.program_io import detect_mode, load_state, predictor_for, read_state, skeleton
from reflect_sql.programs.entailment_loop import entailment_score
from reflect_sql.programs.expected_score import expected_scores, truth_probabilities
from reflect_sql.programs.invoke import make_predictor
from reflect_sql.programs.judgment import RUBRICS, Rubric, placed
from reflect_sql.programs.synthesis_loop import CRITERIA, semantic_score
from reflect_sql.settings import Settings
from reflect_sql.signatures.entailment_judge import EntailmentChecks, EntailmentJudge
from reflect_sql.signatures.scales import ONE_LINE, Scale
from reflect_sql.signatures.semantic_judge import SemanticChecks, SemanticJudge

FORMS = ("literal", "int", "words", "verdict_first", "flipped", "checks", "verdict")
YES_NO_FORMS = ("checks", "verdict")
JUDGES = ("semantic", "entailment")
WORDS = ("wrong", "mostly wrong", "half right", "mostly right", "right")
_SIGNATURES = {"semantic": SemanticJudge, "entailment": EntailmentJudge}


def _word_value(word: str, scale: Scale) -> float:
    step = (scale.high - scale.low) / (len(WORDS) - 1)
    return scale.low + WORDS.index(word) * step


# How the shipped instructions ask for the scores, and how the old (literal) and the words forms ask.
_ASKED = {
    "semantic": ("then its score, an integer from 1 (wrong) to 10 (right) that agrees with the rationale:",
                 "then a score from 1 to 10:",
                 "then its score as one of the words " + ", ".join(WORDS) + ", agreeing with the rationale:"),
    "entailment": ("Score two things, each an integer from 1 (wrong) to 5 (right):",
                   "Score two things on a 1-5 scale:",
                   "Score two things, each as one of the words " + ", ".join(WORDS) + ":"),
}


# The score descriptions of the signatures before the scale fix, for the literal (old) form.
_OLD_DESC = {
    "column_consistency": "C, 1-10: 1 wrong columns, 5 one wrong/missing, 10 exact.",
    "granularity": "G, 1-10: 1 wrong level/aggregate, 5 grouping off, 10 exact.",
    "join_consistency": "J, 1-10: 1 wrong/missing keys, 5 spurious join, 10 correct.",
    "query_logic": "Q, 1-10: 1 different question, 5 one thing wrong, 10 correct.",
    "e_schema": "E_schema, 1-5: 1 different question, 3 one mismatch, 5 exact.",
    "e_data": "E_data, 1-5: 1 cannot be the answer, 3 suspicious, 5 clearly the answer.",
}


# The verdict form: one True/False question standing for every score of the judge.
_VERDICT = {
    "semantic": ("correct", "True only when the query is right on all four criteria: columns, granularity, joins, logic"),
    "entailment": ("answers_question", "True only when the result is the answer to the question"),
}
_VERDICT_INSTRUCTIONS = {
    "semantic": """You review a SQL query written for a question, before it runs. Judge its meaning, not its
    style, on four criteria: the columns it selects and filters on; its granularity and aggregation;
    its joins; its logic (filters, literals, ordering, arithmetic, NULLs). Answer with True or False,
    then give a diagnosis: the concrete problems and how to fix them, or "none" if there are none.""",
    "entailment": """A SQL query was run for a question; you see the query, a preview of its result and the
    findings of automatic result checks (measured facts: an error finding means the data cannot be the
    answer as it stands). Judge whether the result answers the question: whether the query's tables,
    columns and filters mean what the question asks, and whether the data looks like the answer.
    Answer with True or False, then give a diagnosis: what is wrong and how the query should change,
    or "none" when the result answers the question.""",
}
# The checks form is the shipped one of ``judge_form: checks``.
_CHECKS_SIGNATURES = {"semantic": SemanticChecks, "entailment": EntailmentChecks}


def yes_no_rubric(judge: str, form: str) -> Rubric | None:
    """The rubric that places a yes/no form's answers on the judge's scales (None for scored forms)."""
    if form == "checks":
        return RUBRICS[_CHECKS_SIGNATURES[judge].__name__]
    if form == "verdict":
        scored = RUBRICS[_SIGNATURES[judge].__name__]
        return Rubric(scored.scores, scored.reason_field, dict.fromkeys(scored.scores, _VERDICT[judge][0]))
    return None


def _instructions(judge: str, form: str) -> str:
    text = _SIGNATURES[judge].instructions
    shipped, old, words = _ASKED[judge]
    pattern = r"\s+".join(map(re.escape, shipped.split()))  # the docstring wraps lines anywhere
    if not re.search(pattern, text):
        raise AssertionError(f"the {judge} judge's instructions no longer ask for scores as {shipped!r}")
    return re.sub(pattern, lambda _: {"literal": old, "words": words}.get(form, shipped), text)


def _rebuild(judge: str, form: str, outputs: dict[str, tuple[Any, Any]]) -> type[dspy.Signature]:
    """The judge's signature with its output fields replaced by ``outputs`` (in that order), same name."""
    signature = _SIGNATURES[judge]
    fields = {name: (info.annotation, info) for name, info in signature.input_fields.items()}
    fields.update(outputs)
    return dspy.make_signature(fields, _instructions(judge, form), signature.__name__)


def form_signature(judge: str, form: str) -> tuple[type[dspy.Signature], Callable[[str, Any], float | None]]:
    """(signature, value) for a judge in a form; value maps one parsed score field to a number."""
    base = _SIGNATURES[judge]
    rubric = RUBRICS[base.__name__]
    outputs = {name: (info.annotation, info) for name, info in base.output_fields.items()}

    def as_int(name: str, raw: Any) -> float | None:
        return float(raw) if rubric.scores[name].contains(raw) else None

    if form == "int":
        return base, as_int
    if form == "literal":
        for name, scale in rubric.scores.items():
            options = Literal[tuple(range(scale.low, scale.high + 1))]  # type: ignore[misc]
            outputs[name] = (options, dspy.OutputField(desc=_OLD_DESC[name]))
        return _rebuild(judge, form, outputs), as_int
    if form == "words":
        for name, scale in rubric.scores.items():
            desc = f"{name}: one of {', '.join(repr(w) for w in WORDS)}"
            outputs[name] = (Literal[WORDS], dspy.OutputField(desc=desc))  # type: ignore[valid-type]
        return _rebuild(judge, form, outputs), lambda name, raw: _word_value(raw, rubric.scores[name]) if raw in WORDS else None
    if form in YES_NO_FORMS:
        def answered(name: str, raw: Any) -> float | None:
            return float(rubric.scores[name].high if raw else rubric.scores[name].low) if isinstance(raw, bool) else None
        if form == "checks":
            return _CHECKS_SIGNATURES[judge], answered
        signature = _SIGNATURES[judge]
        inputs = {name: (info.annotation, info) for name, info in signature.input_fields.items()}
        field, desc = _VERDICT[judge]
        fields = {field: (bool, dspy.OutputField(desc=desc)), "diagnosis": outputs["diagnosis"]}
        return dspy.make_signature({**inputs, **fields}, _VERDICT_INSTRUCTIONS[judge], signature.__name__), answered
    if form == "verdict_first":
        verdict = (bool, dspy.OutputField(desc="true when the SQL answers the question exactly, false otherwise"))
        return _rebuild(judge, form, {"verdict": verdict, **outputs}), as_int
    if form == "flipped":
        if judge == "semantic":
            ordered: dict[str, tuple[Any, Any]] = {}
            for score, rationale, _, _ in CRITERIA:
                ordered[score], ordered[rationale] = outputs[score], outputs[rationale]
            ordered["diagnosis"] = outputs["diagnosis"]
        else:
            ordered = {
                "schema_rationale": (str, dspy.OutputField(desc=f"{ONE_LINE} on schema entailment.")),
                "e_schema": outputs["e_schema"],
                "data_rationale": (str, dspy.OutputField(desc=f"{ONE_LINE} on data entailment.")),
                "e_data": outputs["e_data"],
                "diagnosis": outputs["diagnosis"],
            }
        return _rebuild(judge, form, ordered), as_int
    raise UserError(f"unknown form {form!r} (choose from {', '.join(FORMS)})")


def combined(judge: str, values: dict[str, float], settings: Settings) -> float:
    if judge == "semantic":
        return semantic_score({label: values[field] for field, _, _, label in CRITERIA}, settings)
    return entailment_score(values["e_schema"], values["e_data"], settings)


@dataclass
class Judged:
    key: str
    kind: str
    correct: bool
    form: str
    judge: str
    values: dict[str, float] | None  # None: unparsable or off its scale
    score: float | None
    all_bottom: bool
    seconds: float
    raw: dict[str, Any]
    # Under ``judge_scores: expected``: the same reply's scores as expected values over the digits'
    # probabilities (None when the reply's tokens do not locate every score, or the form is words).
    expected_values: dict[str, float] | None = None
    expected_score: float | None = None


def judge_case(case: labelled.Case, judge: str, form: str, settings: Settings, lm: dspy.BaseLM,
               demos: list | None = None) -> Judged:
    """One judge's reply to one case; ``demos`` (a compiled judge's) are shown in the ``int`` form,
    the shipped one, whose fields they were written for."""
    signature, value = form_signature(judge, form)
    rubric = RUBRICS[_SIGNATURES[judge].__name__]
    # Every form gets the budget and the stop marker the pipeline gives the judge.
    budget = settings.semantic_judge_max_tokens if judge == "semantic" else settings.entailment_judge_max_tokens
    example = (labelled.semantic_examples if judge == "semantic" else labelled.entailment_examples)([case])[0]
    started = time.perf_counter()
    raw: dict[str, Any] = {}
    values: dict[str, float] | None = None
    expected: dict[str, float] | None = None
    probabilities = settings.judge_scores == "expected" and form != "words"
    try:
        predictor = make_predictor(signature, budget, token_probabilities=probabilities)
        if demos and form == "int":
            predictor.demos = [dspy.Example(**d) if isinstance(d, dict) else d for d in demos]
        with dspy.context(lm=lm):
            out = predictor(**example.inputs())
        raw = {k: out[k] for k in signature.output_fields}
        yes_no = yes_no_rubric(judge, form)
        source = yes_no.checks if yes_no is not None else {}
        mapped = {name: value(name, raw.get(source.get(name, name))) for name in rubric.scores}
        values = None if any(v is None for v in mapped.values()) else mapped  # type: ignore[assignment]
        if probabilities and values is not None and out.get("logprobs"):
            if yes_no is not None:
                truths = truth_probabilities(out["logprobs"], sorted(set(source.values())))
                expected = None if truths is None else placed(yes_no, truths)
            else:
                expected = expected_scores(out["logprobs"], rubric.scores)
    except Exception as exc:  # noqa: BLE001 - an unparsable reply is a measured outcome, not a crash
        raw = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    seconds = time.perf_counter() - started
    bottom = values is not None and all(values[n] == s.low for n, s in rubric.scores.items())
    return Judged(case.question.key, case.kind, case.correct, form, judge, values,
                  combined(judge, values, settings) if values is not None else None, bottom, seconds,
                  {k: (v if isinstance(v, (str, int, float, bool)) or v is None else str(v)) for k, v in raw.items()},
                  expected, combined(judge, expected, settings) if expected is not None else None)


def summarize(rows: list[Judged], settings: Settings) -> list[dict[str, Any]]:
    out = []
    for judge in JUDGES:
        threshold = settings.theta_s if judge == "semantic" else settings.theta_e
        for form in FORMS:
            mine = [r for r in rows if r.judge == judge and r.form == form]
            if not mine:
                continue
            readings = [("stated", lambda r: r.score)]
            if any(r.expected_score is not None for r in mine):
                readings.append(("expected", lambda r: r.expected_score))
            for scores, score_of in readings:
                parsed = [(score_of(r), r.correct) for r in mine if score_of(r) is not None]
                right = [s for s, correct in parsed if correct]
                wrong = [s for s, correct in parsed if not correct]
                out.append({
                    "judge": judge, "form": form, "scores": scores, "n": len(mine), "unusable": len(mine) - len(parsed),
                    "auc": None if (a := auc([s for s, _ in parsed], [c for _, c in parsed])) is None else round(a, 3),
                    "agreement": round(sum((s >= threshold) == c for s, c in parsed) / len(mine), 3),
                    "all_bottom": round(sum(r.all_bottom for r in mine) / len(mine), 3),
                    "mean_right": round(sum(right) / len(right), 2) if right else None,
                    "mean_wrong": round(sum(wrong) / len(wrong), 2) if wrong else None,
                    "seconds_per_reply": round(sum(r.seconds for r in mine) / len(mine), 1),
                    **best_threshold(parsed, len(mine)),
                })
    return out


def best_threshold(parsed: list[tuple[float, bool]], n: int) -> dict[str, float | None]:
    """The threshold with the best agreement on these cases (accept at or above it), halfway between
    two adjacent scores, and that agreement; None when no threshold beats a constant answer.
    Chosen on the cases it is reported for, it flatters them: carry it to other cases
    (``--set theta_s=...``) to measure it."""
    scores = sorted({score for score, _ in parsed})
    if len(scores) < 2:
        return {"best_threshold": None, "agreement_at_best": None}
    cuts = [round((a + b) / 2, 3) for a, b in zip(scores, scores[1:])]
    agreement = {cut: sum((score >= cut) == correct for score, correct in parsed) / n for cut in cuts}
    # Of equal agreements the lowest: the loops then send back fewer answers for another round.
    best = max(cuts, key=lambda cut: (agreement[cut], -cut))
    # A cut no better than one constant answer (accept every case, or reject every one) is no
    # threshold: the judge then tells these cases apart no better than not asking it.
    right = sum(correct for _, correct in parsed)
    if agreement[best] <= max(right, len(parsed) - right) / n:
        return {"best_threshold": None, "agreement_at_best": None}
    return {"best_threshold": best, "agreement_at_best": round(agreement[best], 3)}


def markdown(summary: list[dict[str, Any]], header: str) -> str:
    cols = ("judge", "form", "scores", "n", "unusable", "auc", "agreement", "all_bottom", "mean_right", "mean_wrong",
            "seconds_per_reply", "best_threshold", "agreement_at_best")
    lines = [header, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in summary:
        lines.append("| " + " | ".join("–" if row[c] is None else str(row[c]) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def compiled_demos(state: dict[str, Any], judges: list[str], where: Path) -> dict[str, list]:
    """Each judge's demos in a saved program's ``state``."""
    loaded = skeleton(detect_mode(state, where))
    load_state(loaded, state, where=where)
    found = {}
    for judge in judges:
        predictor = predictor_for(loaded, f"{judge}_judge")
        found[judge] = list(predictor.demos) if predictor is not None else []
    return found


def _unseen_by(state: dict[str, Any], questions: list, where: Path) -> None:
    """A compiled judge is measured only on questions its compile never saw."""
    meta = state["metadata"].get("reflect_sql") or {}
    seen = set((meta.get("train") or {}).get("questions") or [])
    shared = sorted(q.key for q in questions if q.key in seen)
    if shared:
        raise UserError(f"{where} was compiled on {len(shared)} of the questions judged here "
                        f"({', '.join(map(str, shared[:5]))}): pick a compile.train split disjoint from it")


def _same_program(out: Path, this: str) -> None:
    """An out dir holds the rows of one program: resuming with another would mix two judges in one table."""
    marker = out / "program.txt"
    if marker.exists() and marker.read_text(encoding="utf-8").strip() != this:
        raise UserError(f"{out} holds rows judged with program {marker.read_text(encoding='utf-8').strip()}, "
                        f"not {this}: use another --out")
    marker.write_text(this + "\n", encoding="utf-8")


def run(oc, out: Path, forms: list[str], judges: list[str], log: Callable[[str], None] = lambda _: None,
        lms: tuple | None = None, program: Path | None = None) -> list[dict]:
    """Judge every labelled case of the config's train split in every form; resumable through ``rows.jsonl``.

    With ``program`` (a compiled program file) the ``int`` form shows each judge's compiled demos."""
    experiment = oc.experiment
    settings = experiment.settings.model_copy(update={"use_enrichment": False})
    state, demos, this = {}, {}, "none"
    if program is not None:
        state = read_state(program)  # parsed once: its demos and its train split
        demos = compiled_demos(state, judges, program)
        this = f"{program} {hashlib.sha256(program.read_bytes()).hexdigest()}"
    out.mkdir(parents=True, exist_ok=True)
    _same_program(out, this)
    evaluated = experiment.dataset.load()
    questions = train_questions(experiment, oc.compile, evaluated)
    if program is not None:
        _unseen_by(state, questions, program)
    # Only its engines and retrievers are used: the judges here are the bare forms, never a compiled program.
    factory = PipelineFactory(replace(experiment, settings=settings), out / "work", program="none", lms=lms)
    judge_lm = factory.judge_lm
    try:
        contexts = labelled.Contexts(factory, settings)
        cases = labelled.judge_cases(questions, contexts, experiment.dataset.format, experiment.score_timeout_s)
        log(f"{len(cases)} labelled cases ({sum(c.correct for c in cases)} right) from {len(questions)} questions "
            f"disjoint from the {len(evaluated)} evaluated")
        done_path = out / "rows.jsonl"
        rows: list[Judged] = []
        seen: set[tuple] = set()
        if done_path.exists():
            for line in done_path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    r = Judged(**json.loads(line))
                    rows.append(r)
                    seen.add((r.key, r.kind, r.judge, r.form))
        with done_path.open("a", encoding="utf-8") as sink:
            # Case-major order: every form of one case runs back to back, so with the shared-head layout
            # the engine's prefix cache holds that case's schema for all of them.
            for i, case in enumerate(cases, 1):
                for judge in judges:
                    for form in forms:
                        if (case.question.key, case.kind, judge, form) in seen:
                            continue
                        r = judge_case(case, judge, form, settings, judge_lm, demos.get(judge))
                        rows.append(r)
                        sink.write(json.dumps(r.__dict__, ensure_ascii=False) + "\n")
                        sink.flush()
                        log(f"[{i}/{len(cases)}] {judge}/{form} {'right' if case.correct else case.kind}: "
                            f"score {r.score} ({r.seconds:.1f}s)")
    finally:
        factory.close()
    summary = summarize(rows, settings)
    header = (f"Judge scale forms, bare signatures, {settings.effective_judge_lm}, {len(cases)} labelled cases "
              f"({sum(c.correct for c in cases)} right, {sum(not c.correct for c in cases)} wrong); "
              f"thresholds theta_s={settings.theta_s:g}, theta_e={settings.theta_e:g}, layout {settings.prompt_layout}, "
              f"judge_scores {settings.judge_scores}, adapter {settings.adapter}; "
              + (f"the int form with the demos of {program}." if program else "no demos."))
    (out / "judge_scale.md").write_text(markdown(summary, header), encoding="utf-8")
    (out / "judge_scale.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return summary
