"""One subcommand as data: its name, help, arguments and what runs it; the root parser registers each the same way."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from anagrapheus.cli.report import Outcome

__all__ = ["Command", "add_unit_option"]


@dataclass(frozen=True, slots=True)
class Command:
    """A subcommand of `anagrapheus`: a command module declares one, and `parser()` registers every one alike."""

    name: str
    """What the user types after `anagrapheus`."""
    help: str
    """Its line in `anagrapheus --help`."""
    description: str
    """Its paragraph in `anagrapheus NAME --help`."""
    arguments: Callable[[argparse.ArgumentParser], None]
    """Adds its own arguments (every command also takes `--json`)."""
    run: Callable[[argparse.Namespace], Outcome]
    """Runs it on the parsed arguments."""

    def register(self, commands: Callable[..., argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
        """Add it to the root parser, through its subparsers' `add_parser`."""
        parser = commands(self.name, parents=[common], help=self.help, description=self.description)
        self.arguments(parser)
        parser.set_defaults(run=self.run)


def add_unit_option(parser: argparse.ArgumentParser) -> None:
    """Add `--unit`, narrowing what a command reads to the units named."""
    parser.add_argument("--unit", action="append", default=[], metavar="ID", help="only this unit (repeatable)")
