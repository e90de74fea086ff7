"""``reflect-sql kb build|search|show|history|rollback``: the knowledge base of one database.

sentence-transformers and chromadb load inside the commands that embed or search, so ``kb show``
and ``kb history`` start fast and an unchanged ``kb build`` never loads the embedder.
"""
from __future__ import annotations

import argparse
import json

from reflect_sql.cli.common import DB_HELP, add_command_group, add_json_arg, add_settings_args, notice, settings_from_args
from reflect_sql.errors import UserError, require_question


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = add_command_group(subparsers, "kb", "build, search and version the knowledge base of a database")

    build = sub.add_parser("build", help="build or incrementally rebuild a KB from a database and its docs")
    build.add_argument("--db", required=True, help=DB_HELP)
    _kb_dir(build)
    build.add_argument("--descriptions", metavar="DIR", help="BIRD database_description folder (<table>.csv files)")
    build.add_argument("--tables-json", metavar="F", help="Spider/BIRD tables.json (names and foreign keys)")
    build.add_argument("--db-id", help="entry of --tables-json / --train (default: the database file's stem)")
    build.add_argument("--glossary", metavar="F", help="YAML with 'terms' (term: meaning) and 'aliases' (alias: value)")
    build.add_argument("--train", metavar="F", help="training pairs: JSON list or JSON lines of question/evidence/SQL")
    build.add_argument("--describe", action="store_true",
                       help="have the LM (setting `lm`) describe columns that have no description")
    add_settings_args(build)
    build.set_defaults(func=cmd_build)

    search = sub.add_parser("search", help="two-step retrieval: the schema context for a question")
    _kb_dir(search)
    search.add_argument("question")
    search.add_argument("--evidence", default="", help="a hint searched along with the question (BIRD evidence)")
    search.add_argument("--k", type=int, help="tables (default: setting k_tables)")
    search.add_argument("--m", type=int, help="columns per table (default: setting m_columns)")
    add_json_arg(search, 'print {"tables": [...], "columns": [...], "values": [...]}')
    add_settings_args(search)
    search.set_defaults(func=cmd_search)

    show = sub.add_parser("show", help="what the KB knows about one table")
    _kb_dir(show)
    show.add_argument("table")
    add_json_arg(show, "print the table, its foreign keys and examples as JSON")
    add_settings_args(show)
    show.set_defaults(func=cmd_show)

    history = sub.add_parser("history", help="every KB version: builds, enrichments, rollbacks")
    _kb_dir(history)
    add_json_arg(history, "print every version's log entry as JSON")
    add_settings_args(history)
    history.set_defaults(func=cmd_history)

    rollback = sub.add_parser("rollback", help="make an earlier version current again (as a new version)")
    _kb_dir(rollback)
    rollback.add_argument("version", type=int, metavar="VERSION")
    add_settings_args(rollback)
    rollback.set_defaults(func=cmd_rollback)


def _kb_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kb-dir", metavar="DIR", help="the KB directory (default: setting kb_dir)")


def _dir(args: argparse.Namespace, settings) -> str:
    return str(args.kb_dir or settings.kb_dir)


def cmd_build(args: argparse.Namespace) -> int:
    from reflect_sql.kb.build import build_kb

    settings = settings_from_args(args)
    describer = None
    if args.describe:
        from reflect_sql.kb.describe import DescriptionWriter
        from reflect_sql.lm.factory import make_lm

        describer = DescriptionWriter(lm=make_lm(settings.lm, settings, role="describer"))
    report = build_kb(args.db, _dir(args, settings), settings, descriptions=args.descriptions,
                      tables_json=args.tables_json, glossary=args.glossary, train=args.train, db_id=args.db_id,
                      describer=describer)
    for warning in report.warnings:
        notice(warning, "warning")
    print(report.summary())
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from reflect_sql.kb.retrieve import Retriever

    settings = settings_from_args(args)
    require_question(args.question)
    if (args.k is not None and args.k < 1) or (args.m is not None and args.m < 0):
        raise UserError("--k must be at least 1 and --m at least 0")
    retriever = Retriever(_dir(args, settings), settings)
    try:
        context = retriever.retrieve(args.question, k=args.k, m=args.m, evidence=args.evidence)
    finally:
        retriever.close()
    if args.json:
        data = context.to_json()
        print(json.dumps({key: data[key] for key in ("tables", "columns", "values")}, ensure_ascii=False))
    else:
        print(context.render())
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from reflect_sql.kb.versions import KBDir

    settings = settings_from_args(args)
    kb = KBDir(_dir(args, settings)).load()
    table = kb.table(args.table)
    if table is None:
        known = ", ".join(t.name for t in kb.tables)
        raise UserError(f"no table {args.table!r} in the KB (tables: {known})")
    keys = [fk for fk in kb.foreign_keys if table.name in (fk.table, fk.ref_table)]
    examples = [e for e in kb.examples if table.name in e.tables]
    if args.json:
        print(json.dumps({"table": asdict(table), "foreign_keys": [asdict(fk) for fk in keys],
                          "examples": [asdict(e) for e in examples], "kb_version": kb.version},
                         ensure_ascii=False, default=str))
        return 0
    rows = f"{table.row_count} rows" if table.row_count is not None else "rows unknown"
    title = f"{table.name}" + (f" ({table.natural_name})" if table.natural_name else "")
    print(f"{title}: {rows}, {len(table.columns)} columns; KB version {kb.version}")
    if table.description:
        print(f"  {table.description}")
    for c in table.columns:
        flags = " PK" if c.primary_key else ""
        print(f"- {c.name} {c.type}{flags}" + (f"  [{c.natural_name}]" if c.natural_name else ""))
        if c.description:
            print(f"    meaning ({c.description_source or 'unknown'}): {c.description}")
        if c.value_description:
            print("    values: " + " ".join(c.value_description.split()))
        if c.samples:
            print("    samples: " + ", ".join(repr(s) for s in c.samples))
        for alias, value in c.aliases.items():
            print(f"    alias: {alias!r} -> {value!r}")
    for fk in keys:
        print(f"join: {fk.table}({', '.join(fk.columns)}) -> {fk.ref_table}({', '.join(fk.ref_columns)})")
    for e in examples:
        print(f"example ({e.source}): {e.question}\n    {' '.join(e.sql.split())}")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from reflect_sql.kb.versions import KBDir

    settings = settings_from_args(args)
    directory = KBDir(_dir(args, settings))
    current = directory.load().version
    entries = directory.history()
    if args.json:
        print(json.dumps(entries, ensure_ascii=False, default=str))
        return 0
    for e in entries:
        marker = "*" if e["version"] == current else " "
        changes = f", {len(e['changes'])} changes" if e.get("changes") else ""
        print(f"{marker} v{e['version']:<4} {e['time']}  {e['action']:<8} {e['summary']}{changes}")
    return 0


def cmd_rollback(args: argparse.Namespace) -> int:
    from reflect_sql.kb.enrich import rollback
    from reflect_sql.kb.versions import KBDir

    settings = settings_from_args(args)
    kb_dir = _dir(args, settings)
    before = KBDir(kb_dir).load().version
    kb = rollback(kb_dir, args.version)
    print(f"restored the content of version {args.version} as version {kb.version} (was version {before})")
    return 0
