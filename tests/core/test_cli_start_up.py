"""The CLI builds only the named command's module, and every command is mapped to its module."""
from __future__ import annotations

import argparse

from reflect_sql import cli


def _commands(parser: argparse.ArgumentParser) -> set[str]:
    return set(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


def test_every_command_is_mapped_to_the_module_that_registers_it():
    assert _commands(cli.build_parser()) == set(cli.COMMANDS)
    for command, module in cli.COMMANDS.items():
        assert module in cli.COMMAND_MODULES
        assert command in _commands(cli.build_parser(command))


def test_an_unknown_or_missing_command_gets_the_whole_parser():
    assert _commands(cli.build_parser("nope")) == _commands(cli.build_parser()) == set(cli.COMMANDS)


def _options(parser: argparse.ArgumentParser, path: str = "reflect-sql"):
    """(command path, action) for every option of every command and subcommand."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _options(child, f"{path} {name}")
        elif action.option_strings:
            yield path, action


def test_shared_flags_mean_one_thing_in_every_command():
    from reflect_sql.cli.common import TIMEOUT_HELP

    seen = {"--out": 0, "--json": 0, "--timeout": 0, "--set": 0}
    for path, action in _options(cli.build_parser()):
        flag = action.option_strings[0]
        if flag in seen:
            seen[flag] += 1
        if flag == "--out":  # a directory, or its help says which file it is
            assert action.metavar == "DIR" or action.help.startswith("a file, not a directory"), path
        elif flag == "--json":
            assert isinstance(action, argparse._StoreTrueAction) and action.help, path
        elif flag == "--timeout":
            assert action.help.startswith(TIMEOUT_HELP) and action.type is float, path
        elif flag == "--set":
            assert action.dest == "set_" and isinstance(action, argparse._AppendAction), path
    assert all(seen.values()), seen
    export = cli.build_parser("export").parse_args(["export", "p.json", "--json"])
    assert export.json is True
