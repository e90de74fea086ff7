"""``reflect-sql demo``: the paper's restaurant manager asks the SmartRestaurant database.

It composes the other commands (demo-db, kb build, ask) so the demo shows exactly what a user gets
from them: the database is generated if missing, its KB is built from the scenario's descriptions
and glossary (not from its question set, so no gold SQL leaks into the prompts), then each question
is answered with its trace.
"""
from __future__ import annotations

import argparse
import json

from reflect_sql.cli.common import add_program_arg

# The paper's section 8 examples, by question_id in the scenario's questions.json.
PAPER_QUESTIONS = "0,2,1"


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo", help="answer the paper's restaurant questions on the SmartRestaurant database")
    parser.add_argument("--db", default="demo_data/smartrestaurant.sqlite", help="SQLite file (generated if missing)")
    parser.add_argument("--kb-dir", default="demo_data/kb", metavar="DIR", help="its knowledge base (built if missing)")
    parser.add_argument("--questions", default=PAPER_QUESTIONS, metavar="IDS",
                        help=f"question_ids of the scenario's questions.json (default {PAPER_QUESTIONS})")
    parser.add_argument("--mode", choices=["reflect", "single-pass"], default="reflect")
    parser.add_argument("--lm", metavar="M", help="generator LM (default: the settings' lm)")
    parser.add_argument("--judge-lm", metavar="M", help="judge LM (default: the generator's model)")
    parser.add_argument("--json", action="store_true", help="print each answer as JSON")
    add_program_arg(parser)
    parser.add_argument("--config", metavar="F", help="YAML settings file")
    parser.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE")
    parser.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from importlib.resources import files

    from reflect_sql.cli import main
    from reflect_sql.errors import UserError
    from reflect_sql.experiments.smartrestaurant.demo_db import ensure_demo_db
    from reflect_sql.kb.versions import KBDir

    scenario = files("reflect_sql.experiments.smartrestaurant")
    questions = {str(q["question_id"]): q for q in json.loads((scenario / "questions.json").read_text(encoding="utf-8"))}
    wanted = [i.strip() for i in args.questions.split(",") if i.strip()]
    unknown = [i for i in wanted if i not in questions]
    if unknown:
        raise UserError(f"no question_id {', '.join(unknown)} in the SmartRestaurant question set")

    # The program is checked once, before the database and the KB are made (each ask resolves it again).
    from reflect_sql.cli.common import settings_from_args
    from reflect_sql.programs.shipped import resolve_program

    resolve_program(args.program, settings_from_args(args, lm=args.lm, judge_lm=args.judge_lm).lm)
    ensure_demo_db(args.db)
    shared = [f"--set={pair}" for pair in args.set_] + (["--config", args.config] if args.config else [])
    if not KBDir(args.kb_dir).exists():
        code = main(["kb", "build", "--db", args.db, "--kb-dir", args.kb_dir,
                     "--descriptions", str(scenario / "descriptions"),
                     "--glossary", str(scenario / "glossary.yaml")])
        if code:
            return code
    status = 0
    for qid in wanted:
        q = questions[qid]
        print(f"\n=== Q{qid}: {q['question']}")
        argv = ["ask", "--db", args.db, "--kb-dir", args.kb_dir, "--mode", args.mode,
                "--evidence", q.get("evidence", ""), *shared]
        for flag, value in (("--lm", args.lm), ("--judge-lm", args.judge_lm), ("--program", args.program)):
            if value:
                argv += [flag, value]
        if args.json:
            argv.append("--json")
        status = max(status, main([*argv, q["question"]]))
    return status
