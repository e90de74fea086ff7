"""``reflect-sql demo``: the paper's restaurant manager asks the SmartRestaurant database.

It calls what the other commands call (demo-db's database, kb build, ask's answer and its display),
so the demo shows exactly what a user gets from them: the database is generated if missing, its KB
is built from the scenario's descriptions and glossary (not from its question set, so no gold SQL
leaks into the prompts), the models load once, then each question is answered with its trace.
"""
from __future__ import annotations

import argparse
import json
import sys

from reflect_sql.cli.common import add_json_arg, add_program_arg, add_settings_args

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
    add_json_arg(parser, "print each answer as JSON")
    add_program_arg(parser)
    add_settings_args(parser)
    parser.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    from importlib.resources import files

    from reflect_sql.cli.ask_cmd import answer_question, print_answer, status
    from reflect_sql.cli.common import settings_from_args
    from reflect_sql.errors import UserError
    from reflect_sql.experiments.assembly import assemble
    from reflect_sql.experiments.smartrestaurant.demo_db import ensure_demo_db
    from reflect_sql.kb.build import build_kb
    from reflect_sql.kb.versions import KBDir
    from reflect_sql.errors import require_text
    from reflect_sql.programs.shipped import resolve_program

    scenario = files("reflect_sql.experiments.smartrestaurant")
    questions = {str(q["question_id"]): q for q in json.loads((scenario / "questions.json").read_text(encoding="utf-8"))}
    wanted = [i.strip() for i in args.questions.split(",") if i.strip()]
    unknown = [i for i in wanted if i not in questions]
    if unknown:
        raise UserError(f"no question_id {', '.join(unknown)} in the SmartRestaurant question set")

    settings = settings_from_args(args, lm=args.lm, judge_lm=args.judge_lm, kb_dir=args.kb_dir)
    # The program is checked before the database and the KB are made; the LMs load after them.
    choice = resolve_program(args.program, settings.lm)
    ensure_demo_db(args.db)
    if not KBDir(args.kb_dir).exists():
        report = build_kb(args.db, args.kb_dir, settings, descriptions=str(scenario / "descriptions"),
                          glossary=str(scenario / "glossary.yaml"))
        for warning in report.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        print(report.summary())
    assembly = assemble(settings, choice)  # one model load for every question
    code = 0
    for qid in wanted:
        q = questions[qid]
        print(f"\n=== Q{qid}: {q['question']}")
        evidence = q.get("evidence", "")
        require_text(evidence, "evidence")
        prediction = answer_question(assembly, args.db, q["question"], evidence, args.mode, True, status)
        code = max(code, print_answer(prediction, assembly, args.json))
    return code
