"""The figures of a results file as Markdown, for docs/BENCHMARKS.md.

``python -m bench.markdown`` prints them; ``--write docs/BENCHMARKS.md`` replaces what stands
between the ``<!-- figures:start -->`` and ``<!-- figures:end -->`` markers, so that the
document always shows the figures of the results file it names, never hand-copied ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.report import human

RESULTS = Path(__file__).resolve().parent / "results"
START, END = "<!-- figures:start -->", "<!-- figures:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(body: dict[str, Any], source: str) -> str:
    machine = body["machine"]
    lines = [
        f"Figures from `{source}`: `{body['command'].strip()}`, started {body['started']}, "
        f"{body.get('seconds', '?')} s in all.",
        "",
        f"Machine: {machine['nproc']} × {machine['cpu']}, {machine['memory_gib']} GiB, Python {machine['python']}, "
        f"SQLite {machine['sqlite']}, {machine['platform']}; load average at start "
        f"{', '.join(str(x) for x in machine['load_average_at_start'])} (other work shared the machine).",
        "",
        "### Targets",
        "",
        "| | target | reached | |",
        "|---|---|---|---|",
    ]
    for letter, scenario in body["scenarios"].items():
        for target in scenario["targets"]:
            lines.append(f"| {letter} | {_cell(target['label'])} | {human(target['value'], target['unit'])} | "
                         f"{'met' if target['met'] else '**missed**'} |")
    for letter, reason in body.get("skipped", {}).items():
        lines.append(f"| {letter} | (skipped) | {_cell(reason)} | |")
    for letter, scenario in body["scenarios"].items():
        lines += ["", f"### {letter}. {scenario['title']}", "", "| figure | value | detail |", "|---|---:|---|"]
        for figure in scenario["figures"]:
            lines.append(f"| {_cell(figure['label'])} | {human(figure['value'], figure['unit'])} | {_cell(figure['note'])} |")
        for figure in scenario["ratios"]:
            lines.append(f"| ratio: {_cell(figure['label'])} | **{human(figure['value'], 'x')}** | {_cell(figure['note'])} |")
        for note in scenario["notes"]:
            lines += ["", f"_{note}_"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.markdown", description=__doc__)
    parser.add_argument("results", nargs="?", type=Path, default=RESULTS / "latest.json")
    parser.add_argument("--write", type=Path, help="a Markdown file with the figures markers to update")
    args = parser.parse_args(argv)
    body = json.loads(args.results.read_text())
    try:
        source = str(args.results.resolve().relative_to(Path.cwd()))
    except ValueError:
        source = str(args.results)
    text = render(body, source)
    if args.write is None:
        print(text)
        return 0
    document = args.write.read_text()
    if START not in document or END not in document:
        print(f"{args.write} has no {START} … {END} markers", file=sys.stderr)
        return 1
    head, rest = document.split(START, 1)
    _, tail = rest.split(END, 1)
    args.write.write_text(f"{head}{START}\n{text}\n{END}{tail}")
    print(f"updated {args.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
