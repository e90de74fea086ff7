"""``reflect-sql ask``: answer one question with Reflect-SQL (or the single-pass baseline)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from reflect_sql.cli.common import DB_HELP, add_settings_args, settings_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "ask", help="answer a question over a database and show the SQL, the result and the trace",
        description="Answer QUESTION over --db. With --kb-dir the knowledge base there is used (and built "
                    "on first use); without it the whole schema is the context.",
        epilog="Exit status: 0 with an answer (even a best-effort one at a cap), 1 when no SQL could be "
               "produced, 2 on bad input.",
    )
    parser.add_argument("question", nargs="?", default="", help="the question, in natural language")
    parser.add_argument("--db", required=True, help=DB_HELP)
    parser.add_argument("--kb-dir", metavar="DIR", help="knowledge base directory (built here if new)")
    parser.add_argument("--evidence", default="", help="external knowledge or hints for this question")
    parser.add_argument("--lm", metavar="M", help="generator LM (local/qwen2.5-coder-1.5b or any LiteLLM model)")
    parser.add_argument("--judge-lm", metavar="M", help="judge LM (default: the generator's model)")
    parser.add_argument("--mode", choices=["reflect", "single-pass"], default="reflect")
    parser.add_argument("--no-retrieval-loop", action="store_true", help="retrieve once, no retrieval judge")
    parser.add_argument("--no-sql-reflection", action="store_true", help="no syntax repair and no semantic judge")
    parser.add_argument("--no-entailment", action="store_true", help="run the SQL once, no checks or entailment judge")
    parser.add_argument("--no-enrichment", action="store_true", help="never write to the knowledge base")
    parser.add_argument("--json", action="store_true", help="print the answer, scores, trace and cost as JSON")
    add_settings_args(parser)
    parser.set_defaults(func=_ask)


def _switches(args: argparse.Namespace) -> dict[str, Any]:
    """Flags that turn a loop off; absent flags leave config and --set in charge."""
    out: dict[str, Any] = {"lm": args.lm, "judge_lm": args.judge_lm, "kb_dir": args.kb_dir}
    if args.no_retrieval_loop:
        out["use_retrieval_loop"] = False
    if args.no_sql_reflection:
        out["use_syntax_reflection"] = False
        out["use_semantic_reflection"] = False
    if args.no_entailment:
        out["use_entailment"] = False
    if args.no_enrichment:
        out["use_enrichment"] = False
    return out


def open_retriever(settings, engine, db: str, use_kb: bool, status):
    """The KB retriever of ``settings.kb_dir`` (built first when the directory holds no KB), or the
    whole-schema retriever when no KB directory was asked for."""
    from reflect_sql.programs.retriever import SchemaRetriever

    if not use_kb:
        return SchemaRetriever(engine.introspect())
    from reflect_sql.errors import UserError
    from reflect_sql.kb.build import build_from_engine, canonical_db
    from reflect_sql.kb.retrieve import Retriever
    from reflect_sql.kb.versions import KBDir

    directory = KBDir(settings.kb_dir)
    if not directory.exists():
        status(f"building the knowledge base in {settings.kb_dir} (first use) ...")
        report = build_from_engine(engine, db, settings.kb_dir, settings)
        status(report.summary())
    elif directory.load().database != canonical_db(db):
        raise UserError(f"{settings.kb_dir} holds the KB of {directory.load().database}, not {db}: use another --kb-dir")
    return Retriever(settings.kb_dir, settings)


def _ask(args: argparse.Namespace) -> int:
    from reflect_sql.errors import UserError

    if not args.question.strip():
        raise UserError('the question is empty: reflect-sql ask --db DB "How many dishes are on the menu?"')
    settings = settings_from_args(args, **_switches(args))
    from reflect_sql.programs.answer import require_question, require_text

    require_question(args.question)  # before any model or database is opened
    require_text(args.evidence, "evidence")
    # An explicit kb_dir (flag, --set, config or environment) asks for the KB; the default does not.
    use_kb = "kb_dir" in settings.model_fields_set

    import dspy

    from reflect_sql.db import open_engine
    from reflect_sql.lm.factory import configure_lms
    from reflect_sql.lm.adapters import make_adapter
    from reflect_sql.programs import build_program, prediction_to_json

    def status(message: str) -> None:
        print(message, file=sys.stderr)

    generator_lm, judge_lm = configure_lms(settings)
    dspy.configure(lm=generator_lm, adapter=make_adapter(settings))
    with open_engine(args.db, settings) as engine:
        retriever = open_retriever(settings, engine, args.db, use_kb, status)
        try:
            program = build_program(settings, engine, retriever, mode=args.mode,
                                    generator_lm=generator_lm, judge_lm=judge_lm)
            prediction = program(question=args.question, evidence=args.evidence)
        finally:
            close = getattr(retriever, "close", None)
            if close is not None:
                close()
    answer = prediction_to_json(prediction)
    if args.json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
    else:
        show(answer, prediction.retrieved)
    return 0 if answer["sql"] is not None else 1


SHOWN_ROWS = 50  # the terminal view only; --json prints every row and the whole trace
NOTE_SQL_CHARS = 160


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if value != int(value) else str(int(value))
    return str(value)


def _scores_text(scores: dict[str, Any]) -> str:
    parts = [f"{k}={_fmt(v)}" for k, v in scores.items()
             if v is not None and k != "threshold" and not isinstance(v, (dict, list))]
    if "threshold" in scores:
        parts.append(f"(θ={_fmt(scores['threshold'])})")
    return " ".join(parts)


def _note(step: dict[str, Any]) -> str:
    """The one thing worth reading about a step, as rich markup: failure, checks, rewrite, feedback."""
    from rich.markup import escape

    notes = []
    if step.get("failure"):
        notes.append(f"[red]{escape(step['failure'])}[/red]")
    for finding in (step.get("inputs") or {}).get("checks") or []:
        colour = "red" if finding["severity"] == "error" else "yellow"
        notes.append(f"[{colour}]{escape(finding['check'])}[/{colour}]: {escape(finding['message'])}")
    rewrite = step.get("rewrite") or {}
    if "sql" in rewrite:
        sql = " ".join(rewrite["sql"].split())
        notes.append(escape("SQL: " + (sql if len(sql) <= NOTE_SQL_CHARS else sql[: NOTE_SQL_CHARS - 1] + "…")))
    elif rewrite:
        notes.append(escape("rewrite: " + ", ".join(f"{k}={v}" for k, v in rewrite.items())))
    if step.get("feedback") and step["loop"] != "entailment":
        notes.append(escape(step["feedback"].splitlines()[0]))
    return "\n".join(notes)


def show(answer: dict[str, Any], retrieved: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.table import Table

    console = Console()
    if answer["sql"]:
        console.print(Panel(Syntax(answer["sql"], "sql", word_wrap=True), title="SQL", expand=False))
    if answer.get("error"):
        console.print(f"[bold red]error:[/bold red] {escape(answer['error'])}")
    if answer["columns"]:
        console.print(f"[bold]Answer[/bold] ({len(answer['rows'])} rows)")
        table = Table(show_lines=False)
        for name in answer["columns"]:
            table.add_column(escape(str(name)))
        for row in answer["rows"][:SHOWN_ROWS]:
            table.add_row(*("NULL" if v is None else escape(_fmt(v)) for v in row))
        console.print(table)
        if len(answer["rows"]) > SHOWN_ROWS:
            console.print(f"... {len(answer['rows']) - SHOWN_ROWS} more rows (use --json for all)")

    trace = Table(title="Trace", show_lines=True)
    trace.add_column("step", no_wrap=True)
    trace.add_column("loop", no_wrap=True)
    trace.add_column("decision", ratio=2, overflow="fold")
    trace.add_column("scores", ratio=2, overflow="fold")
    trace.add_column("notes", ratio=4, overflow="fold")
    trace.add_column("LM", ratio=2, overflow="fold")
    for step in answer["trace"]:
        cost = step.get("cost") or {}
        lm = (f"{cost['lm_calls']} call(s), {cost['prompt_tokens']}+{cost['completion_tokens']} tok, {cost['seconds']:.1f}s"
              if cost.get("lm_calls") else "")
        label = f"{step['round']}.{step['iteration']}"
        if step["loop"] == "synthesis.syntax":  # round.generation.repair
            label = f"{step['round']}.{step['inputs'].get('generation', 0)}.{step['iteration']}"
        trace.add_row(label, step["loop"], escape(step["decision"]),
                      _scores_text(step.get("scores") or {}), _note(step), lm)
    console.print(trace)
    console.print("retrieved: " + escape(", ".join(retrieved.get("tables") or [])) + f" ({len(retrieved.get('columns') or [])} columns)")
    console.print("scores: " + ", ".join(f"{k} {_fmt(v) if v is not None else '-'}" for k, v in answer["scores"].items()))
    c = answer["cost"]
    console.print(f"cost: {c['lm_calls']} LM calls, {c['prompt_tokens']} prompt + {c['completion_tokens']} completion tokens, {c['seconds']:.1f}s")
