"""The ``reflect-sql`` command. Only the CLI sees every room; each command group is one module.

Heavy libraries (dspy, sentence-transformers, chromadb) are imported inside the commands that need
them, so ``reflect-sql db ...`` starts fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Each module defines ``register(subparsers)``; a command sets ``func(args) -> int``.
COMMAND_MODULES = [
    "reflect_sql.cli.db_cmd",
    "reflect_sql.cli.models_cmd",
    "reflect_sql.cli.demo_db_cmd",
    "reflect_sql.cli.demo_cmd",
    "reflect_sql.cli.kb_cmd",
    "reflect_sql.cli.ask_cmd",
    "reflect_sql.cli.eval_cmd",
    "reflect_sql.cli.optimize_cmd",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reflect-sql",
        description="Reflect-SQL: text-to-SQL with LLM-judged retrieval, synthesis and entailment loops.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that command group is not built yet
                continue
            raise
        module.register(sub)
    return parser


def fail(message: str, code: int = 2) -> int:
    # One line whatever the message holds: a parser's multi-line report (YAML, PostgreSQL's caret
    # under the error) would otherwise read as several errors.
    line = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    print(f"reflect-sql: error: {line}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    from reflect_sql.db.base import EngineError
    from reflect_sql.errors import UserError
    from reflect_sql.settings import SettingsError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UserError, SettingsError) as exc:
        return fail(str(exc))
    except EngineError as exc:
        return fail(f"{exc.kind}: {exc.message}")
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
