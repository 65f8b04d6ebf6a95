"""The ``lastword`` command: serve, tail, push, result, demo, audit, run."""

from lastword.cli.commands import main

__all__ = ["main"]
