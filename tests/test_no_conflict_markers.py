"""No tracked file holds a merge's conflict markers (two landed once, unnoticed, in docs)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(rb"^(<{7} |>{7} |={7}$)", re.M)


def test_no_tracked_file_holds_conflict_markers() -> None:
    """Every tracked text file is free of <<<<<<<, ======= and >>>>>>> lines."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    found = []
    for name in filter(None, tracked.decode().split("\0")):
        path = ROOT / name
        if path.suffix in {".png", ".lock"} or not path.is_file():
            continue
        if MARKER.search(path.read_bytes()):
            found.append(name)
    assert found == []
