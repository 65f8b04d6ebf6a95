"""Summarise py-spy's collapsed stacks: ``python -m bench.profiles bench/results/profiles/a-sqlite_json.txt``.

For each thread, the share of samples; then the functions with the most inclusive and the
most self time (line numbers folded away, so a function counts once per stack).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _short(frame: str) -> str:
    match = _FRAME.match(frame)
    if not match:
        return frame
    path = match["file"]
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{match['name']} ({path})"


def summarise(path: Path, top: int = 25, contains: str | None = None) -> str:
    threads: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        stack, count = match[1].split(";"), int(match[2])
        if contains and not any(contains in frame for frame in stack):
            continue
        total += count
        if stack and stack[0].startswith(("thread", "process")):
            threads[stack[0]] += count
            stack = stack[1:]
        frames = [_short(frame) for frame in stack]
        for frame in set(frames):
            inclusive[frame] += count
        if frames:
            self_time[frames[-1]] += count
    if not total:
        return f"{path}: no samples"
    out = [f"{path}: {total} samples" + (f" (stacks through {contains!r})" if contains else "")]
    out.append("threads:")
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in threads.most_common(8)]
    out.append("inclusive:")
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in inclusive.most_common(top)]
    out.append("self:")
    out += [f"  {100 * n / total:5.1f}%  {name}" for name, n in self_time.most_common(top)]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profiles", description=__doc__)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--contains", help="only stacks with a frame containing this text")
    args = parser.parse_args(argv)
    for path in args.files:
        print(summarise(path, args.top, args.contains))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
