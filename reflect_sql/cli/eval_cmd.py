"""``reflect-sql score | eval | ablate | calibrate``: the research harness (experiments room)."""
from __future__ import annotations

import argparse
import json

from reflect_sql.cli.common import (EXPERIMENT_SET_HELP, add_json_arg, add_out_arg, add_program_arg, add_set_arg,
                                    add_timeout_arg, notice)

SCORE_HELP = """\
Score a predictions file with execution accuracy (EX), as the official evaluators do.
BIRD: correct when set(pred rows) == set(gold rows); errors and timeouts are wrong; reported per
difficulty. Spider: the official test-suite evaluator's execution match (exec_eval.eval_exec_match):
DISTINCT removed from both queries (unless --keep-distinct), rows compared as multisets, as lists
when the gold SQL contains ORDER BY (anywhere, as the official text test), columns in any order.
Accuracies are PERCENTAGES (0-100, two decimals), like the official BIRD evaluator prints them;
a difficulty without questions is null. --json prints
{"simple": x, "moderate": y, "challenging": z, "overall": o, "counts": {...}} (Spider: overall, counts).
Predictions: the official BIRD format {"<index>": "<SQL>\\t----- bird -----\\t<db_id>"} (index =
position in the questions file), a JSON object {question_id: sql}, or JSON/JSONL records with
question_id (or index) and sql, such as an eval run's results.jsonl.
"""


def _add_selection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, metavar="N", help="first N questions (after --db-ids and --sample)")
    parser.add_argument("--sample", type=int, metavar="N", help="a seeded random sample of N questions")
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample (default 0)")
    parser.add_argument("--db-ids", metavar="A,B", help="only questions on these databases")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("score", help="score predictions with execution accuracy", description=SCORE_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, choices=["bird", "spider"], help="dataset format")
    p.add_argument("--questions", required=True, metavar="F", help="questions file (dev.json)")
    p.add_argument("--db-root", required=True, metavar="DIR", help="folder holding <db_id>/<db_id>.sqlite")
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--predictions", metavar="F", help="predictions file (see above)")
    group.add_argument("--gold-as-predictions", action="store_true", help="score the gold SQL itself (sanity check: 100%%)")
    add_timeout_arg(p, "a prediction and its gold query share them, as the official meta_time_out; default 30",
                    default=30.0)
    p.add_argument("--threads", type=int, default=1, help="queries run in parallel (default 1)")
    p.add_argument("--keep-distinct", action="store_true",
                   help="Spider: keep DISTINCT in both queries (the official option; by default it is removed)")
    p.add_argument("--export-bird", metavar="F", help="also write the predictions in the official BIRD format")
    p.add_argument("--details", metavar="F", help="also write one JSON line per question (status, error)")
    add_json_arg(p, "print the table as JSON")
    _add_selection_args(p)
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("eval", help="evaluate the pipeline on a dataset (resumable, tracked in MLflow)",
                       description=EVAL_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG.yaml", help="experiment config (see experiments/configs/)")
    _add_run_args(p)
    add_program_arg(p)
    p.add_argument("--retry-errors", action="store_true", help="on resume, rerun questions whose program raised an exception")
    add_json_arg(p, "print summary.json")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("ablate", help="run an ablation set and write the paper-style table and charts",
                       description="Run every variant of an ablation set (experiments/configs/ablation.yaml) on "
                                   "the same questions; write ablation.md (Simple/Moderate/Challenging/Overall/"
                                   "Δ vs full, EX in percent), charts/ablation.png and charts/accuracy_vs_cost.png. "
                                   "Variants are live MLflow runs nested under one parent run, which starts before the "
                                   "first variant; a resumed ablation continues the same runs.")
    p.add_argument("config", metavar="ABLATION.yaml")
    _add_run_args(p)
    add_program_arg(p)
    p.add_argument("--step", type=int, metavar="N",
                   help="run every variant on N questions, then on the next N, ..., rewriting the table after each "
                        "round: an ablation stopped early has all its variants on the same questions")
    p.set_defaults(func=cmd_ablate)

    p = sub.add_parser("calibrate", help="how well each judge score predicts correctness in an eval run",
                       description="Read RUN_DIR/results.jsonl and report, per judge score (Score_r, S, E), "
                                   "AUC and precision/recall at its threshold; writes calibration.md, "
                                   "calibration.json and charts/calibration.png into RUN_DIR.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="output directory of `reflect-sql eval`")
    add_json_arg(p, "print the report as JSON")
    p.set_defaults(func=cmd_calibrate)


EVAL_HELP = """\
Evaluate the pipeline described by CONFIG.yaml: dataset (format, root, sample/seed/limit/db_ids),
mode (reflect | single-pass), settings, threads, mlflow. Per-question results go to
OUT/results.jsonl as they finish; rerunning with the same --out resumes (finished questions are
not rerun, a line cut by a kill is redone). Writes OUT/summary.json (the `score --json` keys, EX in
percent, plus cost and recall), OUT/predict_<split>.json (official BIRD format), per_question.csv,
charts and the judge calibration. The MLflow run (settings.mlflow_uri) is live: it starts with
the evaluation, logs EX so far, LM calls, tokens and seconds after each question (step = questions
done) and a per-question table, and ends FINISHED, FAILED or KILLED; a resumed run continues it.
The compiled program shipped for the generator LM runs by default (`--program none`: the bare
signatures); run.json and MLflow record its path and sha256, and a resumed run must use the same one.
"""


def _add_run_args(p: argparse.ArgumentParser) -> None:
    add_set_arg(p, EXPERIMENT_SET_HELP)
    p.add_argument("--limit", type=int, metavar="N", help="only the first N selected questions")
    add_out_arg(p, "output directory (default runs/<name>-<time>); an existing one resumes")
    p.add_argument("--no-mlflow", action="store_true", help="do not log to MLflow")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _default_out(name: str) -> str:
    import time

    return f"runs/{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _print_summary(summary: dict) -> None:
    from reflect_sql.experiments.report import format_accuracy_table

    print(format_accuracy_table(summary))
    per_q = summary["cost"]["per_question"]
    if per_q["lm_calls"] is not None:
        print(f"cost per question: {per_q['lm_calls']:.1f} LM calls, {per_q['prompt_tokens']:.0f} prompt + "
              f"{per_q['completion_tokens']:.0f} completion tokens, {per_q['seconds']:.1f} s; "
              f"wall time {summary['wall_seconds']:.0f} s; {summary['errors']} question(s) with an error, "
              f"{summary['exceptions']} crashed")
    program = summary.get("program") or {}
    if program.get("description"):
        print(f"program: {program['description']}")


def cmd_eval(args: argparse.Namespace) -> int:
    from reflect_sql.experiments.shutdown import stop_on_signals

    with stop_on_signals():
        return _eval(args)


def _eval(args: argparse.Namespace) -> int:
    from reflect_sql.experiments.config import load_config
    from reflect_sql.experiments.runner import run_eval

    config = load_config(args.config, args.set_, limit=args.limit)
    out = args.out or _default_out(config.name)
    tracker = None
    if config.mlflow_enabled and not args.no_mlflow:
        from reflect_sql.experiments.tracking import EvalRun, enable_autolog

        enable_autolog(config)
        tracker = EvalRun(config)  # live from the first question; its id is kept in run.json
    summary = run_eval(config, out, progress=not args.no_progress, retry_errors=args.retry_errors,
                       program=args.program, tracker=tracker)
    if tracker is not None:
        notice(f"MLflow run {tracker.run_id} ({config.settings.mlflow_uri})")
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_summary(summary)
        print(f"results in {out}")
    return 0


def cmd_ablate(args: argparse.Namespace) -> int:
    from reflect_sql.experiments.ablation import run_ablation
    from reflect_sql.experiments.shutdown import stop_on_signals

    out = args.out or _default_out("ablation")
    with stop_on_signals():
        result = run_ablation(args.config, out, sets=args.set_, limit=args.limit, mlflow=not args.no_mlflow,
                              progress=not args.no_progress, program=args.program, step=args.step)
    print(result["table"], end="")
    print(f"table, charts and per-variant runs in {out}")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from reflect_sql.experiments import calibration
    from reflect_sql.experiments.results_log import read_run

    run_dir = Path(args.run_dir)
    meta, records = read_run(run_dir)
    thresholds = {k: meta["settings"][k] for k in ("theta_r", "theta_s", "theta_e")}
    rows = calibration.report(records, thresholds, run_dir)
    print(json.dumps(rows, indent=2) if args.json else calibration.markdown(rows).rstrip())
    return 0


def cmd_score(args: argparse.Namespace) -> int:
    from reflect_sql.errors import UserError
    from reflect_sql.experiments.datasets import load_questions, parse_db_ids
    from reflect_sql.experiments.predictions import read_predictions, write_bird_predictions
    from reflect_sql.experiments.report import format_accuracy_table
    from reflect_sql.experiments.scoring import score_predictions

    if args.timeout <= 0:
        raise UserError("--timeout must be positive")
    if args.keep_distinct and args.dataset != "spider":
        raise UserError("--keep-distinct applies to --dataset spider only")
    questions = load_questions(
        args.dataset, args.questions, args.db_root,
        limit=args.limit, sample=args.sample, seed=args.seed, db_ids=parse_db_ids(args.db_ids),
    )
    if args.gold_as_predictions:
        predictions = {q.key: q.gold_sql for q in questions}
    else:
        predictions = read_predictions(args.predictions, questions)
    table, scored = score_predictions(args.dataset, questions, predictions, args.timeout, args.threads,
                                      keep_distinct=args.keep_distinct)
    if args.export_bird:
        write_bird_predictions(args.export_bird, questions, predictions)
    if args.details:
        with open(args.details, "w", encoding="utf-8") as fh:
            for s in scored:
                fh.write(json.dumps({
                    "question_id": s.question.question_id, "db_id": s.question.db_id,
                    "difficulty": s.question.difficulty, "correct": s.match.correct,
                    "status": s.match.status, "detail": s.match.detail, "sql": s.sql,
                }, ensure_ascii=False) + "\n")
    missing = sum(1 for s in scored if s.match.status == "missing")
    if missing:
        notice(f"{missing} question(s) had no prediction and count as wrong")
    print(json.dumps(table) if args.json else format_accuracy_table(table))
    return 0
