"""The ``reflect-sql`` command. Only the CLI sees every room; each command group is one module.

Heavy libraries (dspy, sentence-transformers, chromadb) are imported inside the commands that need
them, so ``reflect-sql db ...`` starts fast.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from reflect_sql.cli.common import fail

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
    "reflect_sql.cli.serve_cmd",
    "reflect_sql.cli.aria_cmd",
]
# The commands each module registers (a test holds this equal to what they register): a named
# command imports and builds its own module only. Building all eight cost ``reflect-sql score``
# more time than a third of its queries.
COMMANDS = {
    "db": "reflect_sql.cli.db_cmd", "models": "reflect_sql.cli.models_cmd",
    "demo-db": "reflect_sql.cli.demo_db_cmd", "demo": "reflect_sql.cli.demo_cmd", "kb": "reflect_sql.cli.kb_cmd",
    "ask": "reflect_sql.cli.ask_cmd", "score": "reflect_sql.cli.eval_cmd", "eval": "reflect_sql.cli.eval_cmd",
    "ablate": "reflect_sql.cli.eval_cmd", "calibrate": "reflect_sql.cli.eval_cmd",
    "tune": "reflect_sql.cli.optimize_cmd", "compile": "reflect_sql.cli.optimize_cmd",
    "judge-scale": "reflect_sql.cli.optimize_cmd", "export": "reflect_sql.cli.optimize_cmd",
    "serve": "reflect_sql.cli.serve_cmd", "aria": "reflect_sql.cli.aria_cmd",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser, or with ``command`` only the parser of the module that registers it."""
    parser = argparse.ArgumentParser(
        prog="reflect-sql",
        description="Reflect-SQL: text-to-SQL with LLM-judged retrieval, synthesis and entailment loops.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in [COMMANDS[command]] if command in COMMANDS else COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that command group is not built yet
                continue
            raise
        module.register(sub)
    return parser


def _error_class(module: str, name: str) -> type[BaseException] | None:
    """An error class of a room that is already imported: one not imported cannot have been raised.

    Importing them up front cost every command 0.4 s (reflect_sql.db pulls in sqlglot, the settings
    pydantic), more than all of what ``reflect-sql score`` computes.
    """
    loaded = sys.modules.get(module)
    return getattr(loaded, name, None) if loaded else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:
        # 130 on Ctrl-C, 143 on SIGTERM (experiments.shutdown turns it into a KeyboardInterrupt).
        from reflect_sql.experiments.shutdown import exit_code

        return fail(f"stopped ({exc})" if str(exc) else "interrupted", exit_code(exc))
    except BrokenPipeError:
        return 0
    except Exception as exc:
        user_errors = tuple(c for c in (_error_class("reflect_sql.errors", "UserError"),
                                        _error_class("reflect_sql.settings", "SettingsError")) if c)
        engine_error = _error_class("reflect_sql.db.base", "EngineError")
        if user_errors and isinstance(exc, user_errors):
            return fail(str(exc))
        if engine_error and isinstance(exc, engine_error):
            # The engine's first line says what failed; PostgreSQL's next ones quote the query
            # with a caret under the error, which one line cannot show.
            first = next((line.strip() for line in str(exc.message).splitlines() if line.strip()), exc.kind)
            return fail(f"{exc.kind}: {first}")
        raise


if __name__ == "__main__":
    sys.exit(main())
