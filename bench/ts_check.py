"""``python -m bench.ts_check``: instructions per event of the ingest check of text chunks that
carry a producer ``ts`` (issue 44), under callgrind, in process.

Batches of 1,000 text chunks (:func:`bench.workload.text_delta`), each with a ``ts`` or none,
through :func:`lastword.ingest.checks.check_pushed` (``check``) or
:func:`lastword.rules.events.is_plain_text_delta` over each event (``plain``), after one small
batch that builds the checks' types: markers as in :mod:`bench.stages`, so only the batches count.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from bench.stages import BATCH, callgrind_counts, marker
from bench.workload import TextSource, text_delta

KINDS = ("ts:check", "none:check", "ts:plain", "none:plain")


def chunk_batches(count: int, with_ts: bool) -> list[list[dict[str, Any]]]:
    source = TextSource(1)
    made = []
    for number in range(count):
        batch = []
        for position in range(BATCH):
            event = text_delta(source.piece(20, 100))
            if with_ts:
                event["ts"] = f"2026-12-05T02:{position % 60:02d}:{number % 60:02d}.{position:03d}Z"
            batch.append(event)
        made.append(batch)
    return made


def run(count: int, kind: str) -> None:
    from lastword.ingest.checks import check_pushed
    from lastword.rules.events import is_plain_text_delta

    ts, how = kind.split(":")
    check: Callable[[list[dict[str, Any]]], object] = (
        check_pushed if how == "check" else lambda events: [is_plain_text_delta(event) for event in events])
    data = chunk_batches(count, ts == "ts")
    check(data[0][:10])
    mark = marker()
    mark()
    for batch in data:
        check(batch)
    mark()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ts_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=5, help="batches of 1,000 chunks (default 5)")
    parser.add_argument("kinds", nargs="*", default=list(KINDS), help=f"of {', '.join(KINDS)} (default all)")
    parser.add_argument("--inner", help=argparse.SUPPRESS)  # one kind, run under callgrind
    args = parser.parse_args(argv)
    if args.inner:
        run(args.batches, args.inner)
        return
    for kind in args.kinds:
        counts = callgrind_counts("bench.ts_check", ["--batches", str(args.batches), "--inner", kind])
        print(f"{kind:<11} {counts[1] / (args.batches * BATCH):8.0f} instr/event")


if __name__ == "__main__":
    main(sys.argv[1:])
