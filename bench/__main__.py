"""``python -m bench``: every scenario of issue 4 against real servers on loopback.

Prints a table and writes ``bench/results/NAME.json`` and ``NAME.png`` (NAME is ``latest`` for
a full run of every scenario, ``quick`` for ``--quick``, ``partial`` for ``--only``; ``--name``
overrides), so a smoke run never overwrites the figures that ``docs/BENCHMARKS.md`` quotes.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import resource
import sys
import time
import traceback
from pathlib import Path

from bench.context import Context, Skip
from bench.report import Result, machine, table, write_json
from bench.server import Profiler

RESULTS = Path(__file__).resolve().parent / "results"

#: scenario letter -> module (each has ``TITLE`` and ``run(ctx) -> Result``)
SCENARIOS = {
    "a": "bench.ingest",
    "b": "bench.single",
    "c": "bench.chunks",
    "d": "bench.latency",
    "e": "bench.idle",
    "f": "bench.fold",
    "g": "bench.restart",
    "h": "bench.adapter",
    "i": "bench.loop_stall",
    "j": "bench.fleet",
    "k": "bench.cli_stream",
    "l": "bench.run_latency",
    "m": "bench.long_line",
    "n": "bench.long_session",
    "o": "bench.wakeups",
    "p": "bench.failover",
    "q": "bench.statements",
    "r": "bench.rollout",
    "s": "bench.ds",
    "t": "bench.ds_stall",
    "u": "bench.worker_wakeups",
    "v": "bench.instructions",
    "w": "bench.webhooks",
    "z": "bench.noop",
}

DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark lastword against real servers on loopback (issue 4, scenarios a-g; "
                    "issue 8, h; i; issue 15, j; webhooks, w; issue 24's rollout, r; Durable Streams beside the Node reference server, s; "
                    "another writer during a maximal /ds JSON append, t).",
        epilog="example: python -m bench --quick --only a,b",
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, for a CI smoke run (well under 2 minutes)")
    parser.add_argument("--only", help="comma-separated scenario letters, e.g. a,d")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("LASTWORD_BENCH_POSTGRES_URL", DEFAULT_POSTGRES),
        help="PostgreSQL server for the PostgreSQL figures (a fresh database is made on it and "
             "dropped afterwards); 'none' to leave them out (default: %(default)s)",
    )
    parser.add_argument("--profile", action="store_true",
                        help="attach py-spy to the server during the timed parts (bench/results/profiles/)")
    parser.add_argument("--profile-gil", action="store_true",
                        help="as --profile, sampling only the thread that holds the GIL (py-spy --gil): "
                             "where one process's CPU goes when the GIL is what limits it")
    parser.add_argument("--workers", help="lastword serve --workers for every server started (sets LASTWORD_WORKERS)")
    parser.add_argument("--name", help="results file name (default: latest, quick or partial)")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="directory for the results files (default: bench/results)")
    parser.add_argument("--no-chart", action="store_true", help="write no chart (python -m bench.ab's runs)")
    return parser


def raise_fd_limit() -> None:
    """Thousands of SSE connections need as many descriptors, here and in the servers we start."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    chosen = list(SCENARIOS) if not args.only else [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    name = args.name or ("quick" if args.quick else "partial" if args.only else "latest")
    if args.workers:
        os.environ["LASTWORD_WORKERS"] = args.workers  # every Server started inherits it
    raise_fd_limit()
    ctx = Context(
        quick=args.quick,
        postgres_url=None if args.postgres.lower() == "none" else args.postgres,
        profiler=Profiler(RESULTS / "profiles" if args.profile or args.profile_gil else None,
                          ("--gil",) if args.profile_gil else ()),
    )
    header = {
        "command": "python -m bench " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": machine(),
    }
    print(f"machine: {header['machine']}")
    results: list[Result] = []
    skipped: dict[str, str] = {}
    began = time.perf_counter()
    for letter in chosen:
        module = importlib.import_module(SCENARIOS[letter])
        print(f"\n== {letter}. {module.TITLE}", flush=True)
        started = time.perf_counter()
        try:
            result: Result = module.run(ctx)
        except Skip as skip:
            print(f"  skipped: {skip}")
            skipped[letter] = str(skip)
            continue
        except Exception:  # one broken scenario must not cost the others' figures
            traceback.print_exc()
            skipped[letter] = "failed: " + traceback.format_exc(limit=1).strip().splitlines()[-1]
            continue
        result.seconds = time.perf_counter() - started
        print(f"  ({result.seconds:.1f} s)", flush=True)
        results.append(result)
    header["seconds"] = round(time.perf_counter() - began, 1)
    header["skipped"] = skipped

    print("\n" + table(results))
    for letter, reason in skipped.items():
        print(f"{letter}  skipped: {reason}")
    json_path = args.results / f"{name}.json"
    write_json(json_path, header, results)
    print(f"\nwrote {json_path.relative_to(Path.cwd()) if json_path.is_relative_to(Path.cwd()) else json_path}")
    if not args.no_chart:
        try:
            from bench.chart import draw

            png = draw(results, args.results / f"{name}.png", header)
            print(f"wrote {png.relative_to(Path.cwd()) if png.is_relative_to(Path.cwd()) else png}")
        except ImportError as error:
            print(f"no chart: {error} (pip install -e '.[bench]')")
    print(f"total {header['seconds']} s")
    return 1 if any(reason.startswith("failed") for reason in skipped.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
