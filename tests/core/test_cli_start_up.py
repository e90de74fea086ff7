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
