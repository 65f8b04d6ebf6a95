"""The lastword package and its tests type-check under mypy --strict (configured in pyproject.toml)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_app_and_tests_pass_mypy_strict() -> None:
    """mypy --strict finds no error in the lastword package nor in tests/."""
    # The cache lives outside the checkout, so a fresh clone on the same machine (CI's) reuses
    # what an earlier run learnt of the dependencies; mypy re-checks any file whose hash changed.
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lastword-mypy"
    checked = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), "-p", "lastword", "-p", "tests"],
                             cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert checked.returncode == 0, checked.stdout[-4000:]


def test_no_global_ignore_of_missing_imports() -> None:
    """Missing stubs are not hidden wholesale: overrides name their modules."""
    config = (ROOT / "pyproject.toml").read_text()
    section = config[config.index("[tool.mypy]"):]
    section = section[: section.find("\n[", 1)] if "\n[" in section[1:] else section
    assert "ignore_missing_imports" not in section
