"""``reflect-sql tune | compile | export``: optimisation (the optimize room)."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from reflect_sql.cli.common import EXPERIMENT_SET_HELP, add_json_arg, add_out_arg, add_program_arg, add_set_arg, notice

TUNE_HELP = """\
Tune theta_r, theta_s, theta_e, alpha, beta and the semantic weights (w_c, w_g, w_j, w_q, on the
simplex) with Optuna; the objective is execution accuracy on the tuning split.
CONFIG is an experiment config, or an optimisation config with `experiment:` and a `tune:` section
(see reflect_sql/optimize/config.py). The study lives in sqlite (default <out>/optuna.db, one
process at a time) or, with --storage postgresql://..., in a server database that several tune
processes (workers, on any machines) share. It is resumable: --trials is the number of completed
trials wanted, and rerunning the same command finishes an interrupted study (an interrupted
trial, or a dead worker's, is retried with its parameters and resumes its per-question results). Writes best_settings.yaml (a settings file), best_config.yaml (an
experiment config for `reflect-sql eval`), optimization_history.png, param_importances.png and,
with --multi-objective (EX vs LM calls per question, NSGA-II), pareto.json and pareto_front.png.
"""

COMPILE_HELP = """\
Compile few-shot anchors with a DSPy optimizer (labeled, bootstrap, random-search, mipro) for the
generator (metric: execution accuracy) and the semantic and entailment judges (metric: agreement
of their decision with labels from gold and perturbed gold SQL). The train split comes from
`compile.train` in the config and must not share a question with the experiment's dataset.
Agreement (EX for the generator) on held-out train questions is printed before and after.
The file records the generator LM it was compiled for (a run on another LM refuses it), the
optimizer, the train split, the command that reproduces it and the report. Run it with
`reflect-sql eval CONFIG --program PROGRAM.json`; saved as programs/compiled/<model>.json for an
embedded model local/<model>, it is what every run on that model loads by default.
"""

JUDGE_SCALE_HELP = """\
Judge the same labelled cases (gold SQL and gold with one injected mistake, from the config's
compile.train split, disjoint from its evaluated questions) with each form of asking for the
scores: literal (a list of options), int (an integer with worded anchors, the shipped form),
words, verdict_first, flipped (the other order of score and rationale), checks (a True/False question per
score), verdict (one True/False question). Bare signatures: no demos,
no retry. Prints and writes AUC, agreement at the threshold and the share of all-bottom replies
per judge and form. Rerunning the same command resumes from DIR/rows.jsonl.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="tune thresholds and weights with Optuna", description=TUNE_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG.yaml")
    p.add_argument("--trials", type=int, metavar="N", help="completed trials wanted in the study (default: config, 20)")
    p.add_argument("--study", metavar="NAME", help="study name (default: config, <experiment>-tune)")
    add_out_arg(p, "output directory (default: config, runs/tune/<study>)")
    p.add_argument("--storage", metavar="URL", help="Optuna storage: sqlite:///FILE (one process) or postgresql://USER@HOST/DB (shared by workers; "
                        "default: sqlite:///<out>/optuna.db)")
    p.add_argument("--seed", type=int, help="sampler seed (default: config, 0)")
    p.add_argument("--multi-objective", action="store_true", default=None,
                   help="maximise EX and minimise LM calls per question (NSGA-II, Pareto front)")
    add_set_arg(p, EXPERIMENT_SET_HELP)
    add_program_arg(p)
    add_json_arg(p)
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("compile", help="compile few-shot anchors with DSPy optimizers", description=COMPILE_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG.yaml")
    add_out_arg(p, "where to save the compiled program", file="PROGRAM.json", required=True)
    p.add_argument("--optimizer", choices=["labeled", "bootstrap", "random-search", "mipro"],
                   help="DSPy optimizer (default: config, bootstrap)")
    p.add_argument("--targets", metavar="A,B", help="generator,semantic_judge,entailment_judge (default: config, all)")
    add_set_arg(p, EXPERIMENT_SET_HELP)
    add_json_arg(p, "print the report as JSON")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("judge-scale", help="measure how each way of asking for judge scores discriminates",
                       description=JUDGE_SCALE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG.yaml", help="an optimisation config; its compile.train split is judged")
    add_out_arg(p, "output directory: rows.jsonl (resumable), judge_scale.md and .json", required=True)
    p.add_argument("--forms", metavar="A,B", help="literal,int,words,verdict_first,flipped,checks,verdict (default: all)")
    p.add_argument("--judges", metavar="A,B", help="semantic,entailment (default: both)")
    p.add_argument("--program", metavar="none|PROGRAM.json",
                   help="a compiled program: the int form shows each judge's demos from it (default, or none: "
                        "no demos, the bare signatures)")
    add_set_arg(p, EXPERIMENT_SET_HELP)
    p.set_defaults(func=cmd_judge_scale)

    p = sub.add_parser("export", help="write a compiled program's prompts (instructions, demos, rendered messages)",
                       description="For each predictor of a saved program: its instructions, its few-shot demos "
                                   "and the prompt messages DSPy's ChatAdapter renders for an example input. "
                                   "Stable order, no timestamps: made for diffs.")
    p.add_argument("program", metavar="PROGRAM.json")
    p.add_argument("--format", choices=["md", "json"], default="md")
    add_json_arg(p, "print JSON (the same as --format json)")
    add_out_arg(p, "write the prompts here instead of to stdout", file="F")
    p.add_argument("--example", metavar="F",
                   help="JSON inputs to render: {field: value}, or {predictor: {field: value}} (default: a built-in example)")
    p.set_defaults(func=cmd_export)


def cmd_tune(args: argparse.Namespace) -> int:
    from reflect_sql.experiments.shutdown import stop_on_signals

    with stop_on_signals():
        return _tune(args)


def _tune(args: argparse.Namespace) -> int:
    from reflect_sql.errors import UserError
    from reflect_sql.optimize.config import load_optimize_config
    from reflect_sql.optimize.study import run_study

    oc = load_optimize_config(args.config, args.set_)
    if args.trials is not None and args.trials < 1:
        raise UserError("--trials must be at least 1")
    if args.storage:
        oc.tune.storage = args.storage
    if args.seed is not None:
        oc.tune.seed = args.seed
    if args.multi_objective:
        oc.tune.multi_objective = True
    result = run_study(oc.experiment, oc.tune, trials=args.trials, study_name=args.study,
                       out=Path(args.out) if args.out else None, progress=sys.stderr.isatty(), log=notice,
                       program=args.program)
    if args.json:
        print(json.dumps({
            "study": result.study_name, "storage": result.storage, "out": str(result.out),
            "completed": result.completed, "best": result.best, "plots": result.plots,
            "best_settings": str(result.best_settings_path) if result.best_settings_path else None,
            "best_config": str(result.best_config_path) if result.best_config_path else None,
            "seconds": result.seconds,
        }, indent=2))
        return 0
    print(f"study {result.study_name}: {result.completed} completed trials ({result.storage})")
    for entry in result.best:
        calls = entry.get("lm_calls_per_question")
        shown = ", ".join(f"{k}={v:g}" for k, v in entry["settings"].items())
        print(f"  trial {entry['trial']}: EX {entry['ex']:.2f}%"
              + (f", {calls:.2f} LM calls/question" if calls is not None else "") + f"  [{shown}]")
    if result.best_config_path:
        print(f"best config: {result.best_config_path}  (reflect-sql eval {result.best_config_path})")
        print(f"best settings: {result.best_settings_path}")
    for name, where in result.plots.items():
        print(f"{name}: {where}")
    return 0


def compile_command(args: argparse.Namespace) -> str:
    """The command line that reproduces this compile, from its parsed arguments."""
    argv = ["reflect-sql", "compile", args.config, "--out", args.out]
    if args.optimizer:
        argv += ["--optimizer", args.optimizer]
    if args.targets:
        argv += ["--targets", args.targets]
    for pair in args.set_:
        argv += ["--set", pair]
    return shlex.join(argv)


def cmd_compile(args: argparse.Namespace) -> int:
    from reflect_sql.optimize.compile import compile_program
    from reflect_sql.optimize.config import load_optimize_config

    oc = load_optimize_config(args.config, args.set_)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()] if args.targets else None
    if targets:
        from reflect_sql.errors import UserError
        from reflect_sql.optimize.config import TARGETS

        bad = [t for t in targets if t not in TARGETS]
        if bad:
            raise UserError(f"--targets: unknown {', '.join(bad)} (choose from {', '.join(TARGETS)})")
    _, report = compile_program(oc, args.out, optimizer=args.optimizer, targets=targets, log=notice,
                                command=compile_command(args))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"saved {args.out} ({report['optimizer']}, {report['mode']} program, {report['seconds']}s)")
        for target, entry in report["targets"].items():
            if "skipped" in entry:
                print(f"  {target}: skipped ({entry['skipped']})")
                continue
            what = "EX" if target == "generator" else "agreement"
            b, a = entry["before"], entry["after"]
            auc = f", AUC {b.get('auc')} -> {a.get('auc')}" if "auc" in b else ""
            if not b["n"]:
                print(f"  {target}: nothing held out (judge_val_fraction 0); {entry['demos']} demos")
                continue
            print(f"  {target}: {what} on {b['n']} held-out {b['accuracy']} -> {a['accuracy']}{auc}; {entry['demos']} demos")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from reflect_sql.errors import UserError
    from reflect_sql.optimize.export import describe, render
    from reflect_sql.optimize.program_io import load_program

    example = None
    if args.example:
        try:
            example = json.loads(Path(args.example).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"example file not found: {args.example}") from None
        except ValueError as exc:
            raise UserError(f"example file {args.example} is not valid JSON: {exc}") from None
        if not isinstance(example, dict):
            raise UserError(f"example file {args.example} must hold a JSON object")
    program, _ = load_program(args.program)
    text = render(describe(program, example), "json" if args.json else args.format)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _choices(text: str | None, allowed: tuple[str, ...], flag: str) -> list[str]:
    from reflect_sql.errors import UserError

    chosen = [t.strip() for t in text.split(",") if t.strip()] if text else list(allowed)
    bad = [t for t in chosen if t not in allowed]
    if bad or not chosen:
        raise UserError(f"{flag}: unknown {', '.join(bad) or 'empty list'} (choose from {', '.join(allowed)})")
    return chosen


def cmd_judge_scale(args: argparse.Namespace) -> int:
    from reflect_sql.optimize.config import load_optimize_config
    from reflect_sql.optimize.judge_scale import FORMS, JUDGES, markdown, run
    from reflect_sql.programs.shipped import NONE

    forms = _choices(args.forms, FORMS, "--forms")
    judges = _choices(args.judges, JUDGES, "--judges")
    oc = load_optimize_config(args.config, args.set_)
    summary = run(oc, Path(args.out), forms, judges, log=notice,
                  program=Path(args.program) if args.program not in (None, NONE) else None)
    print(markdown(summary, f"judge scale forms ({args.out}/judge_scale.md)"))
    return 0
