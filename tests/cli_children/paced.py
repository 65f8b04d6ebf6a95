#!/usr/bin/env python3
"""A child printing a recorded CLI session, paced, for tests where children must run long.

    python paced.py FIXTURE.ndjson EXIT_STATUS GATES SPAN_SECONDS

The fixture's lines are printed in ``GATES + 1`` parts: the first at once; each later part
after a line read from standard input (the test's explicit go, passed on by ``lastword run``;
the end of input opens every gate), its lines spread over ``SPAN_SECONDS`` so that the part
outlasts what the test does meanwhile (a replica's drain). Then it exits with ``EXIT_STATUS``,
the status the real CLI exited with. Standard library only: it stands for the CLI.
"""

from __future__ import annotations

import sys
import time


def parts(lines: list[bytes], count: int) -> list[list[bytes]]:
    """``lines`` cut into ``count`` runs of (nearly) equal length, in order; none empty when
    there are enough lines."""
    size, extra = divmod(len(lines), count)
    cut: list[list[bytes]] = []
    start = 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        cut.append(lines[start:end])
        start = end
    return cut


def main(fixture: str, status: str, gates: str, span: str) -> int:
    with open(fixture, "rb") as source:
        lines = source.read().splitlines(keepends=True)
    out = sys.stdout.buffer
    for number, part in enumerate(parts(lines, int(gates) + 1)):
        if number:
            sys.stdin.readline()  # the test's go ('' at end of input: every gate is open)
        for line in part:
            out.write(line)
            out.flush()
            if number:
                time.sleep(float(span) / len(part))  # pacing, not a wait for anything
    return int(status)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
