"""``reflect-sql db schema`` and ``reflect-sql db sql``: look at a database through the read-only engines;
``reflect-sql db grant-readonly``: the SQL of a PostgreSQL role they accept."""
from __future__ import annotations

import argparse
import json

from reflect_sql.cli.common import (DB_HELP, add_command_group, add_json_arg, add_settings_args, add_timeout_arg,
                                    notice, settings_from_args)


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = add_command_group(subparsers, "db", "inspect a database and run read-only SQL")

    schema = sub.add_parser("schema", help="tables, columns, keys, row counts and sample values")
    schema.add_argument("--db", required=True, help=DB_HELP)
    add_json_arg(schema, "print the schema model as JSON")
    schema.add_argument("--tables-json", metavar="F", help="Spider/BIRD tables.json with extra foreign keys")
    schema.add_argument("--db-id", help="entry of --tables-json (default: the file's stem or the schema name)")
    add_settings_args(schema)
    schema.set_defaults(func=cmd_schema)

    run = sub.add_parser("sql", help="run one read-only query")
    run.add_argument("--db", required=True, help=DB_HELP)
    run.add_argument("sql", metavar="SQL", help="one SELECT query")
    add_json_arg(run, 'print {"columns": [...], "rows": [...]}')
    add_timeout_arg(run, "the query; default: setting query_timeout_s")
    run.add_argument("--max-rows", type=int, metavar="N", help="rows returned at most")
    add_settings_args(run)
    run.set_defaults(func=cmd_sql)

    grant = sub.add_parser("grant-readonly", help="print the SQL of a read-only PostgreSQL role (does not run it)",
                           description="Print the SQL that creates a login role reflect-sql will query as: not a "
                                       "superuser, READ ONLY by default (default_transaction_read_only), reading "
                                       "every table (pg_read_all_data, PostgreSQL 14+) or, when the URL has "
                                       "?schema=NAME, that schema's tables only. Nothing is run: pipe it to psql "
                                       "as an administrator.")
    grant.add_argument("--db", required=True, metavar="URL", help="postgresql://host:port/dbname[?schema=NAME]")
    grant.add_argument("--role", required=True, metavar="NAME", help="the role to create")
    grant.set_defaults(func=cmd_grant_readonly)


def _dumps(data) -> str:
    from reflect_sql.db.values import json_value

    return json.dumps(data, default=json_value, ensure_ascii=False)


def cmd_schema(args: argparse.Namespace) -> int:
    from reflect_sql.db import open_engine

    settings = settings_from_args(args)
    with open_engine(args.db, settings) as engine:
        schema = engine.introspect(tables_json=args.tables_json, db_id=args.db_id)
    if args.json:
        print(_dumps(schema.to_dict()))
        return 0

    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console()
    refs = {}
    for fk in schema.foreign_keys:
        for col, ref in zip(fk.columns, fk.ref_columns):
            refs.setdefault((fk.table, col), []).append(f"{fk.ref_table}.{ref}")
    for table in schema.tables:
        shown = RichTable(title=f"{table.name} ({table.row_count if table.row_count is not None else '?'} rows)",
                          title_justify="left")
        for header in ("column", "type", "key", "samples"):
            shown.add_column(header)
        for column in table.columns:
            key = ", ".join((["PK"] if column.primary_key else []) + [f"-> {r}" for r in refs.get((table.name, column.name), [])])
            shown.add_row(column.name, column.type, key, ", ".join(repr(v) for v in column.samples))
        console.print(shown)
    return 0


def cmd_sql(args: argparse.Namespace) -> int:
    from reflect_sql.db import open_engine

    settings = settings_from_args(args, query_timeout_s=args.timeout, max_rows=args.max_rows)
    with open_engine(args.db, settings) as engine:
        result = engine.execute(args.sql)
    if args.json:
        print(_dumps(result.to_json()))
        return 0

    from rich.console import Console
    from rich.table import Table as RichTable

    from reflect_sql.db.values import json_value

    shown = RichTable()
    for name in result.columns:
        shown.add_column(name)
    for row in result.rows:
        shown.add_row(*("NULL" if v is None else str(v if isinstance(v, (str, int, float)) else json_value(v)) for v in row))
    console = Console()
    console.print(shown)
    note = f" (truncated at --max-rows {len(result.rows)})" if result.truncated else ""
    notice(f"{len(result.rows)} row(s){note} in {result.elapsed_s:.3f} s")
    return 0


def cmd_grant_readonly(args: argparse.Namespace) -> int:
    from reflect_sql.db.connect import is_postgres_url
    from reflect_sql.errors import UserError

    if not is_postgres_url(args.db):
        raise UserError("grant-readonly writes PostgreSQL roles: --db must be a postgresql:// URL")
    from reflect_sql.db.privileges import read_only_role_sql

    print(read_only_role_sql(args.db, args.role), end="")
    return 0
