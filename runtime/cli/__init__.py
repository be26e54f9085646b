"""The ``openrealtime`` command (``command.py``) and its subcommands' modules."""

from runtime.cli.command import main

__all__ = ["main"]
