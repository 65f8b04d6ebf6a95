"""The lastword package type-checks under mypy --strict (configured in pyproject.toml)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_app_passes_mypy_strict() -> None:
    """mypy --strict finds no error in the lastword package."""
    checked = subprocess.run([sys.executable, "-m", "mypy", "-p", "lastword"], cwd=ROOT, capture_output=True, text=True,
                             timeout=600, check=False)
    assert checked.returncode == 0, checked.stdout[-4000:]
