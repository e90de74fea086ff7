"""``reflect-sql demo-db create``: write the SmartRestaurant ("Aria") demo database."""
from __future__ import annotations

import argparse

from reflect_sql.cli.common import add_command_group, add_out_arg


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = add_command_group(subparsers, "demo-db", "the SmartRestaurant demo database")
    create = sub.add_parser("create", help="generate it as SQLite, optionally also into PostgreSQL")
    add_out_arg(create, "the SQLite file to write (replaced atomically)", file="PATH", required=True)
    create.add_argument("--seed", type=int, default=0, help="generator seed (default 0; the gold answers assume 0)")
    create.add_argument(
        "--postgres", metavar="URL",
        help="also load it into this PostgreSQL database: postgresql://user@host:port/db[?schema=NAME] "
             "(a named schema is recreated; in public only the scenario's tables are replaced)",
    )
    create.add_argument("--if-missing", action="store_true",
                        help="keep an existing database built with the same seed and generator version")
    create.set_defaults(func=cmd_create)


def _print_counts(counts: dict[str, int]) -> None:
    width = max(map(len, counts))
    for table, n in counts.items():
        print(f"  {table:<{width}}  {n:>7}")


def cmd_create(args: argparse.Namespace) -> int:
    from reflect_sql.experiments.smartrestaurant.demo_db import create_demo_db, ensure_demo_db

    if args.postgres:  # fail before spending seconds on generation
        from reflect_sql.experiments.smartrestaurant.postgres_load import connect

        connect(args.postgres).close()
    demo = (ensure_demo_db if args.if_missing else create_demo_db)(args.out, args.seed)
    if demo.built:
        print(f"wrote {demo.path} (seed {args.seed}) in {demo.seconds:.1f} s")
        _print_counts(demo.counts)
    else:
        print(f"{demo.path} is already the seed-{args.seed} SmartRestaurant database; kept it")
    if args.postgres:
        from reflect_sql.db.postgres import redact
        from reflect_sql.experiments.smartrestaurant.postgres_load import load_postgres

        counts = load_postgres(demo.path, args.postgres)
        print(f"loaded into {redact(args.postgres)}")
        _print_counts(counts)
    return 0
