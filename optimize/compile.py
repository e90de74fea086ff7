"""``reflect-sql compile``: DSPy optimizers choose the few-shot anchors (and, with MIPROv2, the
instructions) of the generator and of the SQL judges; the result is saved with ``program.save``.

Each target is compiled on its own, as a one-predictor student over examples that hold exactly its
signature's inputs, so every optimizer (LabeledFewShot, BootstrapFewShot, its random search,
MIPROv2) sees complete demos:

- generator: inputs as the pipeline's first generation sees them (the retrieved context); the
  metric is execution accuracy against the gold SQL.
- semantic and entailment judges: known-right and known-wrong SQL (``labelled``); the metric is
  agreement of the judge's decision, as the pipeline takes it (S >= theta_s, E >= theta_e, with the
  configured weights, alpha and beta), with the truth. The judge's raw scores are judged, before
  the pipeline's deterministic checks override E_data.

The train split must not share a question with the evaluated one (``splits.check_disjoint``). It is
cut, by question, into a part the optimizer fits on and a held-out part on which agreement (EX for
the generator) is reported before and after, so the report does not grade demos on their own
questions. The compiled predictors go into the experiment's program (reflect or single-pass),
saved with the split, the optimizer and the report in ``metadata.reflect_sql``.
"""
from __future__ import annotations

import random
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import dspy
from dspy.teleprompt import BootstrapFewShot, BootstrapFewShotWithRandomSearch, LabeledFewShot, MIPROv2

from reflect_sql.errors import UserError
from reflect_sql.experiments.calibration import auc
from reflect_sql.experiments.config import EvalConfig
from reflect_sql.experiments.datasets import Question, select
from reflect_sql.experiments.metrics import match
from reflect_sql.experiments.pipeline import PipelineFactory
from reflect_sql.experiments.tracking import git_commit, log_compile
from reflect_sql.optimize import labelled
from reflect_sql.optimize.config import CompileOptions, OptimizeConfig, with_dataset
from reflect_sql.optimize.export import describe, to_markdown
from reflect_sql.optimize.program_io import keep_signature_names, load_program, predictor_for, save_program, skeleton
from reflect_sql.optimize.splits import check_disjoint, exclude
from reflect_sql.programs.entailment_loop import entailment_score
from reflect_sql.programs.invoke import with_expected_scores
from reflect_sql.programs.sql_text import clean_sql
from reflect_sql.programs.synthesis_loop import CRITERIA, semantic_score
from reflect_sql.settings import Settings

JUDGE_TARGETS = ("semantic_judge", "entailment_judge")


class Student(dspy.Module):
    """One predictor, called with its signature's inputs: what an optimizer compiles for a target.

    It keeps the pipeline predictor's call settings (budget, stop marker, token log-probabilities),
    and a judge's reply is read as the pipeline reads it (``judge_scores``), so the metric judges
    the decisions the pipeline would take."""

    def __init__(self, predictor: dspy.Predict):
        super().__init__()
        self.predict = dspy.Predict(predictor.signature, **predictor.config)
        self.role = predictor.signature.__name__

    def forward(self, **inputs):
        return with_expected_scores(self.predict(**inputs), self.role)


# --- metrics -----------------------------------------------------------------------------------


def generator_metric(timeout_s: float, max_value_bytes: int) -> Callable:
    def metric(example, pred, trace=None) -> bool:
        sql = clean_sql(getattr(pred, "sql", ""))
        return match(example.fmt, sql, example.sql, example.db_path, timeout_s, max_value_bytes).correct

    return metric


def semantic_value(pred, settings: Settings) -> float:
    return semantic_score({label: float(getattr(pred, field)) for field, _, _, label in CRITERIA}, settings)


def entailment_value(pred, settings: Settings) -> float:
    return entailment_score(float(pred.e_schema), float(pred.e_data), settings)


def judge_metric(value: Callable[[Any, Settings], float], threshold: float, settings: Settings) -> Callable:
    def metric(example, pred, trace=None) -> bool:
        try:
            passed = value(pred, settings) >= threshold
        except (AttributeError, TypeError, ValueError):
            return False
        return passed == bool(example.label)

    return metric


def measure(student: dspy.Module, examples: list[dspy.Example], metric: Callable,
            value: Callable[[Any], float] | None = None) -> dict[str, Any]:
    """Share of ``examples`` the metric accepts; an LM failure counts against it."""
    agree = failures = 0
    scores, labels = [], []
    for example in examples:
        try:
            pred = student(**example.inputs())
        except Exception:  # noqa: BLE001 - an unparsable answer is a wrong answer, not a crash
            failures += 1
            continue
        agree += bool(metric(example, pred))
        if value is not None:
            try:
                scores.append(value(pred))
                labels.append(bool(example.label))
            except (AttributeError, TypeError, ValueError):
                failures += 1
    n = len(examples)
    out: dict[str, Any] = {"n": n, "agree": agree, "accuracy": round(agree / n, 4) if n else None, "failures": failures}
    if value is not None:
        out["auc"] = None if (value_auc := auc(scores, labels)) is None else round(value_auc, 4)
    return out


# --- optimizers --------------------------------------------------------------------------------


def run_optimizer(name: str, student: dspy.Module, fit: list, val: list, metric: Callable,
                  options: CompileOptions) -> dspy.Module:
    if name == "labeled":
        return LabeledFewShot(k=options.max_labeled_demos).compile(
            student, trainset=balanced(fit, options.seed), sample=False)
    if name == "bootstrap":
        return BootstrapFewShot(metric=metric, max_bootstrapped_demos=options.max_bootstrapped_demos,
                                max_labeled_demos=options.max_labeled_demos, max_rounds=1).compile(student, trainset=fit)
    if name == "random-search":
        return BootstrapFewShotWithRandomSearch(
            metric=metric, max_bootstrapped_demos=options.max_bootstrapped_demos,
            max_labeled_demos=options.max_labeled_demos, num_candidate_programs=options.num_candidate_programs,
            num_threads=options.threads,
        ).compile(student, trainset=fit, valset=val or fit)
    if name == "mipro":
        optimizer = MIPROv2(metric=metric, auto=options.mipro_auto, max_bootstrapped_demos=options.max_bootstrapped_demos,
                            max_labeled_demos=options.max_labeled_demos, num_threads=options.threads, seed=options.seed)
        return optimizer.compile(student, trainset=fit, valset=val or None, requires_permission_to_run=False)
    raise UserError(f"unknown optimizer {name!r}")


def balanced(examples: list, seed: int) -> list:
    """``examples`` in a seeded order that alternates their labels (right, wrong, right, ...), so the
    first k are as balanced as k allows. Anchors drawn at random from gold and perturbed SQL can all
    be right, and teach a small judge that every query is right. Unlabelled examples (the
    generator's) are only shuffled."""
    rng = random.Random(seed)
    groups: dict[Any, list] = {}
    for example in examples:
        groups.setdefault(example.get("label") if hasattr(example, "get") else None, []).append(example)
    for group in groups.values():
        rng.shuffle(group)
    # Right first: a reader meets what a good query looks like before a flawed one.
    order = sorted(groups, key=lambda label: (label is not True, str(label)))
    out = []
    while any(groups.values()):
        for label in order:
            if groups[label]:
                out.append(groups[label].pop())
    return out


def clean_demos(predictor: dspy.Predict, trim: bool, dialect: str) -> list[dict[str, Any]]:
    """Demos with only the signature's fields (labels and ids stay out of prompts and files), their
    schema context cut to the tables their SQL uses."""
    fields = set(predictor.signature.fields)
    out = []
    for demo in predictor.demos:
        data = demo.toDict() if hasattr(demo, "toDict") else dict(demo)
        kept = {k: v for k, v in data.items() if k in fields or k == "augmented"}
        if trim and "schema_context" in kept and kept.get("sql"):
            kept["schema_context"] = labelled.trim_schema_context(str(kept["schema_context"]), str(kept["sql"]), dialect)
        out.append(kept)
    return out


# --- splits ------------------------------------------------------------------------------------


def train_questions(experiment: EvalConfig, options: CompileOptions, evaluated: list[Question]) -> list[Question]:
    spec = dict(options.train)
    exclude_eval = bool(spec.pop("exclude_eval", False))
    if not spec and not exclude_eval:
        raise UserError("compile needs a train split disjoint from the evaluated questions: set compile.train "
                        "in the config, e.g. {sample: 20, seed: 7, exclude_eval: true}, or {split: train}")
    if exclude_eval:
        # Select from what is left once the evaluated questions are out, so the sample keeps its size.
        pool_config = with_dataset(experiment, {**spec, "sample": None, "limit": None})
        pool = exclude(pool_config.dataset.load(), evaluated)
        train = select(pool, sample=spec.get("sample"), seed=spec.get("seed", 0) or 0, limit=spec.get("limit"))
    else:
        train = with_dataset(experiment, spec).dataset.load()
    check_disjoint(train, evaluated)
    if len(train) < 2:
        raise UserError(f"the train split has {len(train)} question(s); compile needs at least 2")
    return train


def hold_out(questions: list[Question], fraction: float, seed: int) -> tuple[list[Question], list[Question]]:
    if fraction <= 0:
        return list(questions), []
    order = list(questions)
    random.Random(seed).shuffle(order)
    n_val = min(len(order) - 1, max(1, round(len(order) * fraction)))
    held = {q.key for q in order[:n_val]}
    return [q for q in questions if q.key not in held], [q for q in questions if q.key in held]


# --- the command -------------------------------------------------------------------------------


def compile_program(oc: OptimizeConfig, out: str | Path, *, lms: tuple | None = None, optimizer: str | None = None,
                    targets: list[str] | None = None, log: Callable[[str], None] = lambda _: None,
                    command: str | None = None) -> tuple[dspy.Module, dict[str, Any]]:
    """Compile, save to ``out``; returns the compiled program (a skeleton: no database behind it)
    and the report (also stored in the file's metadata, with the LMs it was compiled for and
    ``command``, the command line that reproduces it)."""
    started = time.perf_counter()
    experiment, options = oc.experiment, oc.compile
    optimizer = optimizer or options.optimizer
    targets = list(targets or options.targets)
    settings = experiment.settings
    out = Path(out)
    if out.suffix != ".json":
        raise UserError(f"--out must name a .json file, not {out}")

    if settings.judge_form != "scores" and any(t in JUDGE_TARGETS for t in targets):
        # The labelled judgments (optimize/labelled.py) are written as scores and rationales.
        raise UserError(f"compile writes judge anchors in the scores form, not judge_form {settings.judge_form}: "
                        f"compile the judges with judge_form scores, or leave them out of compile.targets")
    evaluated = experiment.dataset.load()
    train = train_questions(experiment, options, evaluated)
    fit_q, val_q = hold_out(train, options.judge_val_fraction, options.seed)
    log(f"train split: {len(train)} questions ({len(fit_q)} to fit, {len(val_q)} held out), "
        f"disjoint from the {len(evaluated)} evaluated")

    work = out.with_name(out.stem + ".compile")
    # Retrieval only: nothing runs the pipeline here, so nothing may enrich a knowledge base.
    retrieval_config = replace(experiment, settings=settings.model_copy(update={"use_enrichment": False}))
    factory = PipelineFactory(retrieval_config, work, program="none", lms=lms)
    generator_lm, judge_lm = factory.assembly.lms
    contexts = labelled.Contexts(factory, settings)
    fmt = experiment.dataset.format
    timeout = experiment.score_timeout_s

    # Saved programs hold the scored judges (programs/shipped.py reads them so), whatever form this
    # run asks in: compiling the generator under judge_form checks must not save checks judges.
    program = skeleton(experiment.mode, settings.model_copy(update={"judge_form": "scores"}))
    report: dict[str, Any] = {"optimizer": optimizer, "mode": experiment.mode, "targets": {}}
    try:
        cases_fit = cases_val = None
        for target in targets:
            predictor = predictor_for(program, target)
            if predictor is None:
                log(f"{target}: the {experiment.mode} program has no such predictor; skipped")
                report["targets"][target] = {"skipped": f"not in the {experiment.mode} program"}
                continue
            if target == "generator":
                fit = labelled.generator_examples(fit_q, contexts, fmt)
                val = labelled.generator_examples(val_q, contexts, fmt)
                metric, value, lm = generator_metric(timeout, experiment.settings.max_value_bytes), None, generator_lm
            else:
                if cases_fit is None:
                    cases_fit = labelled.judge_cases(fit_q, contexts, fmt, timeout)
                    cases_val = labelled.judge_cases(val_q, contexts, fmt, timeout)
                make = labelled.semantic_examples if target == "semantic_judge" else labelled.entailment_examples
                fit, val = make(cases_fit), make(cases_val)
                score = semantic_value if target == "semantic_judge" else entailment_value
                threshold = settings.theta_s if target == "semantic_judge" else settings.theta_e
                metric = judge_metric(score, threshold, settings)
                value, lm = (lambda pred, score=score: score(pred, settings)), judge_lm
            student = Student(predictor)
            t0 = time.perf_counter()
            with dspy.context(lm=lm):
                before = measure(student, val, metric, value)
                compiled = run_optimizer(optimizer, student, fit, val, metric, options)
                after = measure(compiled, val, metric, value)
            name = predictor.signature.__name__
            predictor.signature = compiled.predict.signature
            keep_signature_names(program, {path: name for path, p in program.named_predictors() if p is predictor})
            predictor.demos = clean_demos(compiled.predict, trim=True, dialect=contexts_dialect(fit))
            entry = {
                "fit_examples": len(fit), "held_out_examples": len(val),
                "labels": _label_counts(fit + val) if target != "generator" else None,
                "before": before, "after": after, "demos": len(predictor.demos),
                "seconds": round(time.perf_counter() - t0, 2),
            }
            report["targets"][target] = entry
            what = "EX" if target == "generator" else "agreement"
            measured = (f"{what} on {len(val)} held-out examples {_pct(before)} -> {_pct(after)}" if val
                        else "nothing held out (judge_val_fraction 0)")
            labels = "" if target == "generator" else \
                " (" + ", ".join("right" if d.get("label", True) else "wrong" for d in compiled.predict.demos) + ")"
            log(f"{target}: {measured}, {len(predictor.demos)} demos{labels} ({entry['seconds']}s)")
    finally:
        factory.close()

    report["seconds"] = round(time.perf_counter() - started, 2)
    metadata = {
        # The generator LM a run must use to load this program (programs.shipped), and the judges'.
        "lm": settings.lm, "judge_lm": settings.effective_judge_lm,
        "command": command, "commit": git_commit(),
        "mode": experiment.mode, "optimizer": optimizer, "targets": targets,
        "train": {"dataset": with_dataset(experiment, {k: v for k, v in options.train.items() if k != "exclude_eval"}).dataset.to_json(),
                  "questions": [q.key for q in train], "held_out": [q.key for q in val_q]},
        "evaluated": {"dataset": experiment.dataset.to_json(), "questions": len(evaluated)},
        "settings": {k: getattr(settings, k) for k in ("theta_s", "theta_e", "beta", "w_c", "w_g", "w_j", "w_q")},
        "report": report,
    }
    save_program(program, out, metadata)
    if experiment.mlflow_enabled:
        saved, _ = load_program(out)
        log_compile(experiment, out, metadata, to_markdown(describe(saved)))
    return program, report


def contexts_dialect(examples: list[dspy.Example]) -> str:
    return next((str(e.get("dialect")) for e in examples if e.get("dialect")), "sqlite")


def _label_counts(examples: list[dspy.Example]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in examples:
        counts[e.kind] = counts.get(e.kind, 0) + 1
    return dict(sorted(counts.items()))


def _pct(m: dict[str, Any]) -> str:
    return "n/a" if m.get("accuracy") is None else f"{100 * m['accuracy']:.1f}%"
