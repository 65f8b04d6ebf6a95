"""docs/ARCHITECTURE.md names every module of the package, and only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "app" / "lastword"
NAMED = re.compile(r"`(app/lastword/[\w/]+\.py)`")


def test_every_module_is_named_in_the_architecture_doc() -> None:
    """Each .py file under app/lastword appears in ARCHITECTURE.md as `app/lastword/…`, and
    every module the page names exists."""
    modules = {path.relative_to(ROOT).as_posix() for path in PACKAGE.rglob("*.py")}
    named = set(NAMED.findall((ROOT / "docs" / "ARCHITECTURE.md").read_text()))
    assert sorted(modules - named) == [], "modules missing from docs/ARCHITECTURE.md"
    assert sorted(named - modules) == [], "docs/ARCHITECTURE.md names modules that do not exist"
