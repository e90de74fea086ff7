"""``reflect-sql ask``: answer one question with Reflect-SQL (or the single-pass baseline)."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable

from reflect_sql.cli.common import DB_HELP, add_json_arg, add_program_arg, add_settings_args, notice, settings_from_args


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
    parser.add_argument("--no-sentence", action="store_true",
                        help="do not tell a verified answer in a sentence (saves one LM call)")
    add_json_arg(parser, "print the answer, scores, trace and cost as JSON")
    add_program_arg(parser)
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
    from reflect_sql.errors import require_question, require_text

    require_question(args.question)  # before any setting, model or database is read
    require_text(args.evidence, "evidence")
    settings = settings_from_args(args, **_switches(args))
    # An explicit kb_dir (flag, --set, config or environment) asks for the KB; the default does not.
    use_kb = "kb_dir" in settings.model_fields_set
    from reflect_sql.experiments.assembly import assemble

    assembly = assemble(settings, args.program)  # the program is resolved before any model loads
    prediction = answer_question(assembly, args.db, args.question, args.evidence, args.mode, use_kb, status,
                                 sentence=not args.no_sentence)
    return print_answer(prediction, assembly, args.json)


def status(message: str) -> None:
    notice(message)  # the CLI's one notice style


def answer_question(assembly, db: str, question: str, evidence: str, mode: str, use_kb: bool,
                    status: Callable[[str], None] = status, sentence: bool = True):
    """Answer ``question`` over ``db`` with the assembled program (``experiments.assembly``);
    ``sentence``: tell a verified answer in a sentence (``programs.answer_sentence``)."""
    from reflect_sql.db import open_engine

    with open_engine(db, assembly.settings) as engine:
        retriever = open_retriever(assembly.settings, engine, db, use_kb, status)
        try:
            prediction = assembly.program(engine, retriever, mode)(question=question, evidence=evidence)
        finally:
            close = getattr(retriever, "close", None)
            if close is not None:
                close()
    if sentence:
        from reflect_sql.programs.answer_sentence import AnswerSentence

        prediction = AnswerSentence(assembly.settings, assembly.generator_lm)(question=question, prediction=prediction)
    return prediction


def print_answer(prediction, assembly, as_json: bool) -> int:
    """Print the answer (``--json``: the contract) and the program; the exit status of ``ask``."""
    from reflect_sql.programs import prediction_to_json

    answer = prediction_to_json(prediction)
    status(f"program: {assembly.choice.describe()}")  # after the answer: bad input stays one line on stderr
    if as_json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
    else:
        show(answer, prediction.retrieved)
    return 0 if answer["sql"] is not None else 1


SHOWN_ROWS = 50  # the terminal view only; --json prints every row and the whole trace
WIDTH = 80  # the trace and the result table are laid out for an 80-column terminal
# Short names of the loops for the one-line trace, and the scores each line shows.
LOOP_NAMES = {"retrieval": "retrieve", "synthesis.generate": "generate", "synthesis.syntax": "compile",
              "synthesis.schema_repair": "schema-fix", "synthesis.semantic": "semantic", "entailment": "entail",
              "execution": "execute", "enrichment": "enrich", "result": "result", "answer": "answer"}
SCORE_PARTS = {"retrieval": ("R", "C", "score"), "synthesis.semantic": ("C", "G", "J", "Q", "S"),
               "entailment": ("E_schema", "E_data", "E")}
SCORE_LABELS = {"score": "=", "S": "=", "E": "=", "E_schema": "Es", "E_data": "Ed"}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.2f}" if value != int(value) else str(int(value))
    return str(value)


def _short(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def compact_scores(loop: str, scores: dict[str, Any]) -> str:
    """``R7 C4 =5.8 θ4``: the judge's parts, the combined score and the threshold."""
    parts = []
    for key in SCORE_PARTS.get(loop, ()):
        value = scores.get(key)
        if value is not None:
            label = SCORE_LABELS.get(key, key)
            parts.append(f"{label}{round(value, 1):g}" if isinstance(value, (int, float)) else f"{label}{value}")
    if parts and scores.get("threshold") is not None:
        parts.append(f"θ{scores['threshold']:g}")
    return " ".join(parts)


def trace_lines(trace: list[dict[str, Any]], width: int = WIDTH) -> list[str]:
    """One line per step, at most ``width`` characters: step, loop, decision, scores, LM seconds."""
    lines = []
    for step in trace:
        label = f"{step['round']}.{step['iteration']}"
        if step["loop"] == "synthesis.syntax":  # round.generation.repair
            label = f"{step['round']}.{(step.get('inputs') or {}).get('generation', 0)}.{step['iteration']}"
        cost = step.get("cost") or {}
        seconds = f"{cost['seconds']:.1f}s" if cost.get("lm_calls") else ""
        scores = compact_scores(step["loop"], step.get("scores") or {})
        decision = step.get("decision") or ""
        if step.get("failure"):
            decision = f"! {decision}"
        head = f"{label:<6} {LOOP_NAMES.get(step['loop'], step['loop'])[:10]:<10} "
        tail = f" {scores:>22} {seconds:>6}"
        lines.append(head + _short(decision, width - len(head) - len(tail)).ljust(width - len(head) - len(tail)) + tail)
    return lines


def show(answer: dict[str, Any], retrieved: dict[str, Any]) -> None:
    """The final SQL in full (never inside a table cell, so it never wraps there), the answer rows,
    and the trace as one line per step; ``--json`` has every row and every step in full."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=max(WIDTH, Console().width), highlight=False)
    if answer.get("answer"):
        label = "" if answer.get("answer_source") == "model" else " (the result, rendered plainly)"
        console.print(f"[bold]{escape(answer['answer'])}[/bold]{label}", soft_wrap=True)
    if answer["sql"]:
        console.print("[bold]SQL[/bold]")
        console.print(escape(answer["sql"]), soft_wrap=True)
    if answer.get("error"):
        console.print(f"[bold red]error:[/bold red] {escape(answer['error'])}")
    if answer["columns"]:
        console.print(f"[bold]Answer[/bold] ({len(answer['rows'])} rows)")
        table = Table(show_lines=False, expand=False)
        for name in answer["columns"]:
            table.add_column(escape(str(name)), overflow="ellipsis", no_wrap=True)
        for row in answer["rows"][:SHOWN_ROWS]:
            table.add_row(*("NULL" if v is None else escape(_fmt(v)) for v in row))
        console.print(table)
        if len(answer["rows"]) > SHOWN_ROWS:
            console.print(f"... {len(answer['rows']) - SHOWN_ROWS} more rows (use --json for all)")
    console.print("[bold]Trace[/bold] (step, loop, decision, scores, LM seconds; ! failed: see --json)")
    for line in trace_lines(answer["trace"]):
        console.print(escape(line), soft_wrap=True)
    console.print("retrieved: " + escape(", ".join(retrieved.get("tables") or [])) + f" ({len(retrieved.get('columns') or [])} columns)")
    console.print("scores: " + ", ".join(f"{k} {_fmt(v) if v is not None else '-'}" for k, v in answer["scores"].items()))
    c = answer["cost"]
    reused = c.get("cached_prompt_tokens") or 0
    console.print(f"cost: {c['lm_calls']} LM calls, {c['prompt_tokens']} prompt ({reused} reused from the prefix cache) "
                  f"+ {c['completion_tokens']} completion tokens, {c['seconds']:.1f}s", soft_wrap=True)
