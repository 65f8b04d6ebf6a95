"""The ``lastword`` command: serve, tail, push, result, demo, audit, run, hook."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["hook", "claude-code"]:
        # Run by an agent CLI at each of its hooks, under a deadline: it loads only what it
        # needs (the full command line's imports alone can take seconds on a busy machine).
        # Anything more on its command line is said by the parser (and still exits 0).
        from lastword.cli.hook import main as hook

        return hook()
    from lastword.cli.commands import main as commands

    return commands(argv)


__all__ = ["main"]
