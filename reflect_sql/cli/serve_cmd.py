"""``reflect-sql serve``: Aria's web chat over one database and its KB, on 127.0.0.1 only."""
from __future__ import annotations

import argparse
import sys

from reflect_sql.cli.common import DB_HELP, add_program_arg, add_settings_args, settings_from_args

DEFAULT_PORT = 8750


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve", help="serve Aria, a web chat that answers questions over --db (offline, on 127.0.0.1)",
        description="Serve a web chat on http://127.0.0.1:PORT that answers questions over --db with Reflect-SQL, "
                    "streams each loop step as it runs, tells the verified answer in a sentence and lets the "
                    "reader mark it correct (the KB learns it, human-verified) or wrong (recorded only).",
    )
    parser.add_argument("--db", required=True, help=DB_HELP)
    parser.add_argument("--kb-dir", required=True, metavar="DIR", help="knowledge base directory (built here if new)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT})")
    parser.add_argument("--lm", metavar="M", help="generator LM (local/qwen2.5-coder-1.5b or any LiteLLM model)")
    parser.add_argument("--judge-lm", metavar="M", help="judge LM (default: the generator's model)")
    add_program_arg(parser)
    add_settings_args(parser)
    parser.set_defaults(func=_serve)


def build_chat(settings, engine, db: str, program_arg: str | None, status=lambda m: None):
    """The chat app over an open engine: the program on the settings' LMs, the KB's retriever with
    its enrichment held for the manager's verdict, and the sentence writer."""
    import dspy

    from reflect_sql.cli.ask_cmd import open_retriever
    from reflect_sql.cli.chat_app import Answerer, HeldEnrichment, create_app
    from reflect_sql.experiments.assembly import assemble
    from reflect_sql.kb.retrieve import Retriever
    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.programs.answer_sentence import AnswerSentence

    assembly = assemble(settings, program_arg)  # the program is resolved before any model loads
    first = [open_retriever(settings, engine, db, True, status)]  # builds the KB on first use

    def open_kb():
        return first.pop() if first else Retriever(settings.kb_dir, settings)

    retriever = HeldEnrichment(open_kb)
    answerer = Answerer(assembly.program(engine, retriever), AnswerSentence(settings, assembly.generator_lm), retriever,
                        assembly.generator_lm, make_adapter(settings))
    status(f"program: {assembly.choice.describe()}")
    app = create_app(answerer, settings.kb_dir, db, on_enriched=answerer.reload.set)
    return app, retriever, dspy


def _serve(args: argparse.Namespace) -> int:
    from reflect_sql.errors import UserError

    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port} is not a TCP port (1-65535)")
    settings = settings_from_args(args, lm=args.lm, judge_lm=args.judge_lm, kb_dir=args.kb_dir)
    import uvicorn

    from reflect_sql.db import open_engine

    def status(message: str) -> None:
        print(message, file=sys.stderr)

    with open_engine(args.db, settings) as engine:
        app, retriever, _ = build_chat(settings, engine, args.db, args.program, status)
        try:
            status(f"Aria is listening on http://127.0.0.1:{args.port}/ (Ctrl-C stops it)")
            uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
        finally:
            retriever.close()
    return 0
