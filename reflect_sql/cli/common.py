"""Flags shared by several commands, and the one place they turn into Settings."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reflect_sql.settings import Settings


DB_HELP = "SQLite file path or postgresql://user@host:port/dbname[?schema=NAME] URL"
PROGRAM_HELP = ("compiled program to run: a PROGRAM.json saved by `reflect-sql compile`, or `none` for the bare "
                "signatures (default: the program shipped for the generator LM, bare when none ships for it)")


def add_program_arg(parser: argparse.ArgumentParser) -> None:
    """``--program none|FILE``; resolved by ``reflect_sql.programs.shipped.resolve_program``."""
    parser.add_argument("--program", metavar="none|PROGRAM.json", help=PROGRAM_HELP)


def add_settings_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="F", help="YAML settings file (defaults < YAML < env < flags)")
    parser.add_argument(
        "--set", dest="set_", action="append", default=[], metavar="KEY=VALUE", help="override one setting"
    )
    # The pg_allow_superuser setting, as a flag: settings_from_args sets it.
    parser.add_argument("--allow-superuser", action="store_true",
                        help="query PostgreSQL even as a superuser or a role that reaches server files "
                             "(refused by default; warned about on every run)")


def settings_from_args(args: argparse.Namespace, **flag_overrides: Any) -> Settings:
    """Flags named explicitly by a command win over ``--set``, which wins over env and YAML."""
    # Imported here: pydantic and yaml cost 0.2 s, and commands without settings (score) never need them.
    from reflect_sql.settings import load_settings, parse_assignments

    overrides = parse_assignments(getattr(args, "set_", None))
    if getattr(args, "allow_superuser", False):
        overrides["pg_allow_superuser"] = True
    overrides.update({k: v for k, v in flag_overrides.items() if v is not None})
    return load_settings(getattr(args, "config", None), overrides)
