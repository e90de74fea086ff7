"""The CLI's conventions, each in one place: the flags several commands share, the one place they
turn into Settings, and how a command speaks to the user.

Output: a command's result goes to stdout (as JSON with ``--json``); everything else is one line on
stderr, ``reflect-sql: <kind>: <message>``: ``error`` (exit 2, ``fail``), ``warning`` or ``note``
(``notice``).
"""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reflect_sql.settings import Settings


DB_HELP = "SQLite file path or postgresql://user@host:port/dbname[?schema=NAME] URL"
PROGRAM_HELP = ("compiled program to run: a PROGRAM.json saved by `reflect-sql compile`, or `none` for the bare "
                "signatures (default: the program shipped for the generator LM, bare when none ships for it)")
SET_HELP = "override one setting"
# The experiment commands (eval, ablate, tune, compile, judge-scale) read an experiment config, whose
# keys --set reaches as well.
EXPERIMENT_SET_HELP = "override a setting (theta_r=5) or config key (mode=single-pass, dataset.sample=40)"
TIMEOUT_HELP = "seconds SQL may run before it is stopped"


def fail(message: str, code: int = 2) -> int:
    """Report an error in one line on stderr; returns the exit code."""
    # One line whatever the message holds: a parser's multi-line report (YAML, PostgreSQL's caret
    # under the error) would otherwise read as several errors.
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    print(f"reflect-sql: error: {line}", file=sys.stderr)
    return code


def notice(message: str, kind: str = "note") -> None:
    """Tell the user something beside the result (progress, a warning), in one line on stderr."""
    print(f"reflect-sql: {kind}: {message}", file=sys.stderr)


def add_command_group(subparsers: argparse._SubParsersAction, name: str, help: str,
                      metavar: str = "SUBCOMMAND") -> argparse._SubParsersAction:
    """A command whose work is done by a required subcommand (``db schema``, ``kb build``, ...)."""
    parser = subparsers.add_parser(name, help=help)
    group = parser.add_subparsers(dest=f"{name.replace('-', '_')}_command", metavar=metavar)
    group.required = True
    return group


def add_program_arg(parser: argparse.ArgumentParser) -> None:
    """``--program none|FILE``; resolved by ``reflect_sql.programs.shipped.resolve_program``."""
    parser.add_argument("--program", metavar="none|PROGRAM.json", help=PROGRAM_HELP)


def add_config_arg(parser: argparse.ArgumentParser) -> None:
    """``--config F``: a settings file (an experiment's config is a command's positional argument)."""
    parser.add_argument("--config", metavar="F", help="YAML settings file (defaults < YAML < env < flags)")


def add_set_arg(parser: argparse.ArgumentParser, help: str = SET_HELP) -> None:
    """``--set KEY=VALUE``, repeatable; read by ``settings_from_args`` or an experiment config's loader."""
    parser.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE", help=help)


def add_settings_args(parser: argparse.ArgumentParser) -> None:
    add_config_arg(parser)
    add_set_arg(parser)
    # The pg_allow_superuser setting, as a flag: settings_from_args sets it.
    parser.add_argument("--allow-superuser", action="store_true",
                        help="query PostgreSQL even as a superuser or a role that reaches server files "
                             "(refused by default; warned about on every run)")


def add_json_arg(parser: argparse.ArgumentParser, help: str = "print the result as JSON") -> None:
    parser.add_argument("--json", action="store_true", help=help)


def add_out_arg(parser: argparse.ArgumentParser, help: str, *, file: str | None = None, required: bool = False) -> None:
    """``--out``: a directory, unless ``file`` names the file it is instead, and then its help says so."""
    if file is not None:
        help = f"a file, not a directory: {help}"
    parser.add_argument("--out", required=required, metavar=file or "DIR", help=help)


def add_timeout_arg(parser: argparse.ArgumentParser, detail: str = "", default: float | None = None) -> None:
    """``--timeout S``: the time limit on running SQL, in seconds, whatever the command."""
    parser.add_argument("--timeout", type=float, default=default, metavar="S",
                        help=TIMEOUT_HELP + (f" ({detail})" if detail else ""))


def settings_from_args(args: argparse.Namespace, **flag_overrides: Any) -> Settings:
    """Flags named explicitly by a command win over ``--set``, which wins over env and YAML."""
    # Imported here: pydantic and yaml cost 0.2 s, and commands without settings (score) never need them.
    from reflect_sql.settings import load_settings, parse_assignments

    overrides = parse_assignments(getattr(args, "set_", None))
    if getattr(args, "allow_superuser", False):
        overrides["pg_allow_superuser"] = True
    overrides.update({k: v for k, v in flag_overrides.items() if v is not None})
    return load_settings(getattr(args, "config", None), overrides)
