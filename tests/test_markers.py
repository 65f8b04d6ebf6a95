"""Every test is marked with what it needs, so ``pytest -m unit`` runs the ones that need nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def collected(*args: str) -> set[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:randomly", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return {line.split("::")[0] for line in done.stdout.splitlines() if "::" in line}


def test_unit_keeps_the_rules_and_leaves_servers_browsers_and_clis_out() -> None:
    files = ["tests/test_fold.py", "tests/test_api_texts.py", "tests/test_dashboard.py", "tests/test_cli_live.py",
             "tests/test_core.py"]
    assert collected("-m", "unit", *files) == {"tests/test_fold.py"}
    assert collected("-m", "server and not browser and not clis", *files) == {"tests/test_api_texts.py",
                                                                              "tests/test_core.py"}
    assert collected("-m", "clis", *files) == {"tests/test_cli_live.py"}
