"""``reflect-sql aria``: the paper's section 8 end to end on PostgreSQL. The SmartRestaurant data is
loaded into a local PostgreSQL, its KB is built on pgvector, and Aria's chat serves it.

Without ``--postgres`` the server is the one the PyPI package ``pgserver`` bundles (PostgreSQL with
pgvector), its data under ``--dir``: nothing to install or configure. It runs as long as this
command does, and holds both the restaurant's schema and the KB's vectors. Each step is skipped
when already done: the data is reloaded only when the SQLite file changed, and the KB build is
incremental.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from reflect_sql.cli.common import add_program_arg, add_settings_args, settings_from_args
from reflect_sql.cli.serve_cmd import DEFAULT_PORT

SCHEMA = "smartrestaurant"


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "aria", help="the paper's restaurant assistant: load the demo data into PostgreSQL, build its KB on "
                     "pgvector and serve the chat",
        description="Load the SmartRestaurant database (--sqlite, generated if missing) into PostgreSQL (a local "
                    "bundled server under --dir, or --postgres), build its KB on pgvector and serve Aria's chat "
                    "on http://127.0.0.1:PORT.",
    )
    parser.add_argument("--sqlite", default="demo_data/smartrestaurant.sqlite", help="the generated SQLite file")
    parser.add_argument("--dir", default="demo_data/aria", help="the local PostgreSQL's data and the KB")
    parser.add_argument("--postgres", metavar="URL", help="use this PostgreSQL (with pgvector) instead of a local one")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT})")
    parser.add_argument("--lm", metavar="M", help="generator LM (default: the settings' lm)")
    parser.add_argument("--judge-lm", metavar="M", help="judge LM (default: the generator's model)")
    parser.add_argument("--no-serve", action="store_true", help="load and build, then stop (print the URL and KB)")
    add_program_arg(parser)
    add_settings_args(parser)
    parser.set_defaults(func=_aria)


def local_postgres(folder: Path):
    """The bundled PostgreSQL with its data in ``folder``, started if it is not running; its
    ``cleanup()`` stops it once no other process of ours uses it."""
    import pgserver

    from reflect_sql.kb.pgvector_store import forget_dead_users

    folder.mkdir(parents=True, exist_ok=True)
    forget_dead_users(folder)
    return pgserver.get_server(folder)


READER = "aria_reader"


def local_reader(server: str) -> str:
    """``server``'s URL as ``READER``, a read-only role created on first use (every table of the
    database, so reloading the schema keeps its grants). The local server trusts its socket."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    from reflect_sql.db.privileges import read_only_role_sql

    with psycopg.connect(server, autocommit=True) as admin:
        if not admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [READER]).fetchone():
            admin.execute(read_only_role_sql(server, READER))
    parts = urlsplit(server)
    return urlunsplit(parts._replace(netloc=f"{READER}@{parts.netloc.rsplit('@', 1)[-1]}"))


def with_schema(url: str, schema: str) -> str:
    return url + ("&" if "?" in url else "?") + f"schema={schema}"


def prepare(sqlite: str | Path, folder: str | Path, postgres: str | None = None, status=print) -> tuple[str, str, Path]:
    """(database URL, vector store URL, KB directory): the data loaded, the KB built on pgvector.
    A local server started here runs until this process ends (or ``stop_local`` is called)."""
    from importlib.resources import files

    from reflect_sql.cli import main
    from reflect_sql.errors import UserError
    from reflect_sql.experiments.smartrestaurant.demo_db import ensure_demo_db
    from reflect_sql.experiments.smartrestaurant.postgres_load import load_postgres

    folder = Path(folder)
    demo = ensure_demo_db(sqlite)
    server = postgres or local_postgres(folder / "postgres").get_uri()
    db_url = with_schema(server, SCHEMA)
    stat = Path(demo.path).stat()
    loaded = {"sqlite": str(Path(demo.path).resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "url": db_url}
    marker = folder / "loaded.json"
    if not marker.is_file() or json.loads(marker.read_text(encoding="utf-8")) != loaded:
        status(f"loading {demo.path} into PostgreSQL ({SCHEMA} schema) ...")
        counts = load_postgres(demo.path, db_url)
        status(f"loaded {sum(counts.values()):,} rows in {len(counts)} tables")
        marker.write_text(json.dumps(loaded), encoding="utf-8")
    if postgres is None:
        # The local server runs as its superuser, which the engine refuses to query with: the
        # questions go through a read-only role made by `db grant-readonly`'s SQL.
        db_url = with_schema(local_reader(server), SCHEMA)
    scenario = files("reflect_sql.experiments.smartrestaurant")
    kb_dir = folder / "kb"
    code = main(["kb", "build", "--db", db_url, "--kb-dir", str(kb_dir), "--descriptions", str(scenario / "descriptions"),
                 "--glossary", str(scenario / "glossary.yaml"), "--set", "kb_store=pgvector",
                 "--set", f"kb_store_url={server}"])
    if code:
        raise UserError(f"the KB build for {db_url} failed (exit {code})")
    return db_url, server, kb_dir


def _aria(args: argparse.Namespace) -> int:
    import signal

    settings_from_args(args)  # bad --set or --config fails before the data is touched

    def interrupted(signum, frame):
        raise KeyboardInterrupt  # uvicorn re-sends SIGTERM after its shutdown; end through `finally`

    signal.signal(signal.SIGTERM, interrupted)
    try:
        return _prepare_and_serve(args)
    finally:
        if not args.postgres:
            stop_local(Path(args.dir) / "postgres")


def stop_local(folder: Path) -> None:
    """Stop the local server unless another live process of ours still uses it."""
    from reflect_sql.kb.pgvector_store import forget_dead_users

    forget_dead_users(folder)
    local_postgres(folder).cleanup()


def _prepare_and_serve(args: argparse.Namespace) -> int:
    from reflect_sql.cli import main

    db_url, server, kb_dir = prepare(args.sqlite, args.dir, args.postgres)
    if args.no_serve:
        print(f"database {db_url}\nknowledge base {kb_dir} (pgvector at {server})")
        return 0
    argv = ["serve", "--db", db_url, "--kb-dir", str(kb_dir), "--port", str(args.port),
            *[f"--set={pair}" for pair in args.set_], *(["--config", args.config] if args.config else [])]
    for flag, value in (("--lm", args.lm), ("--judge-lm", args.judge_lm), ("--program", args.program)):
        if value:
            argv += [flag, value]
    return main(argv)
