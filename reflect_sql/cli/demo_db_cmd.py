"""``reflect-sql demo-db create``: write the SmartRestaurant ("Aria") demo database."""
from __future__ import annotations

import argparse

from reflect_sql.cli.common import add_command_group, add_out_arg, fail


def register(subparsers: argparse._SubParsersAction) -> None:
    sub = add_command_group(subparsers, "demo-db", "the SmartRestaurant demo database")
    create = sub.add_parser("create", help="generate it as SQLite, optionally also into PostgreSQL")
    add_out_arg(create, "the SQLite file to write (replaced atomically); with --dataset, the dataset's own by default",
                file="PATH")
    create.add_argument("--seed", type=int, default=0, help="generator seed (default 0; the gold answers assume 0)")
    create.add_argument(
        "--postgres", metavar="URL",
        help="also load it into this PostgreSQL database: postgresql://user@host:port/db[?schema=NAME] "
             "(a named schema is recreated; in public only the scenario's tables are replaced)",
    )
    create.add_argument("--if-missing", action="store_true",
                        help="keep an existing database built with the same seed and generator version")
    create.add_argument("--dataset", metavar="DIR",
                        help="also write the question set as a BIRD-format dataset root (dev.json, dev_databases/"
                             "smartrestaurant/ with the database, descriptions and glossary) for eval and ablate")
    create.add_argument("--twins", action="store_true",
                        help="with --dataset: only the Vietnamese questions and their English twins")
    create.set_defaults(func=cmd_create)


def _print_counts(counts: dict[str, int]) -> None:
    width = max(map(len, counts))
    for table, n in counts.items():
        print(f"  {table:<{width}}  {n:>7}")


def cmd_create(args: argparse.Namespace) -> int:
    from reflect_sql.experiments.smartrestaurant.demo_db import create_demo_db, ensure_demo_db

    if args.twins and not args.dataset:
        return fail("--twins needs --dataset")
    if not (args.out or args.dataset):
        return fail("give --out PATH (the SQLite file to write) or --dataset DIR")
    if args.postgres:  # fail before spending seconds on generation
        from reflect_sql.experiments.smartrestaurant.postgres_load import connect

        connect(args.postgres).close()
    if args.dataset:
        from reflect_sql.experiments.smartrestaurant.bird_layout import write_bird_layout

        root, database = write_bird_layout(args.dataset, twins=args.twins, seed=args.seed)
        print(f"wrote the question set as a BIRD dataset root: {root} (database {database})")
        path = database
    if args.out:
        demo = (ensure_demo_db if args.if_missing else create_demo_db)(args.out, args.seed)
        if demo.built:
            print(f"wrote {demo.path} (seed {args.seed}) in {demo.seconds:.1f} s")
            _print_counts(demo.counts)
        else:
            print(f"{demo.path} is already the seed-{args.seed} SmartRestaurant database; kept it")
        path = demo.path
    if args.postgres:
        from reflect_sql.db.postgres import redact
        from reflect_sql.experiments.smartrestaurant.postgres_load import load_postgres

        counts = load_postgres(path, args.postgres)
        print(f"loaded into {redact(args.postgres)}")
        _print_counts(counts)
    return 0
