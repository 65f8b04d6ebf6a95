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


DIAGRAM_ROW = re.compile(r"^ (\S.*?)\s{2,}\S")


def diagram_layers() -> list[set[str]]:
    """The layers as the page's diagram draws them, top to bottom: a row's `·` joins packages of
    one layer, `→` steps down a layer within a row; the rows after the first blank line (the
    client and the integrations, beside the server's layers) are not layers of this contract."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = text.split("```\n", 2)[1]
    layers: list[set[str]] = []
    for line in block.splitlines():
        if not line.strip():
            break
        row = DIAGRAM_ROW.match(line)
        if row is None:
            continue  # an arrow between rows
        for step in row.group(1).split("→"):
            names = {name.strip().removesuffix("/").removesuffix(".py") for name in step.split("·")}
            layers.append({f"lastword.{name}" for name in names})
    return layers


def test_the_diagram_draws_the_layers_the_import_contract_keeps() -> None:
    """The diagram's layers, in order, are the `layers` contract of pyproject.toml: redrawing
    the layers means redrawing the picture."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = next(c for c in contracts if c["type"] == "layers" and c.get("containers") is None)
    kept = [{name.strip() for name in layer.split("|")} for layer in layered["layers"]]
    assert diagram_layers() == kept
