"""The layers hold: import-linter's contracts (``[tool.importlinter]`` in pyproject.toml) are kept,
each of them fails when its rule is broken, and the rules no import contract can state hold too."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "app" / "lastword"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(package_parent: Path, cache_dir: Path) -> subprocess.CompletedProcess[str]:
    """Run lint-imports with the repository's contracts over the package found in ``package_parent``."""
    env = {"PYTHONPATH": str(package_parent), "PATH": "/usr/bin:/bin"}
    return subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache_dir)],
                          cwd=package_parent, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_contracts_are_kept(tmp_path: Path) -> None:
    checked = lint_imports(ROOT / "app", tmp_path / "cache")
    assert checked.returncode == 0, checked.stdout[-4000:]
    assert "Contracts: 10 kept, 0 broken." in checked.stdout, checked.stdout[-2000:]


# One import that breaks each contract, written into a copy of the package.
BREAKS = {
    "layers": ("store/sql/retention.py", "import lastword.service\n"),
    "client": ("client/core.py", "import lastword.store.base\n"),
    "client-layers": ("client/retry.py", "import lastword.client.core\n"),
    "faces-through-service": ("http/views.py", "import lastword.store.base\n"),
    "no-web-framework-below-the-faces": ("ingest/body.py", "import starlette.requests\n"),
    "store-through-protocols": ("webhooks/sender.py", "import lastword.store.sql.outbox\n"),
    "service-takes-no-http-model": ("service.py", "import lastword.schemas\n"),
    "pure-rules": ("adapters/base.py", "import httpx\n"),
    "adapters-independent": ("adapters/acp.py", "import lastword.adapters.anthropic\n"),
    "integrations": ("integrations/turn_stream.py", "import lastword.service\n"),
}
CONTRACT_NAMES = {
    "layers": "faces -> app -> core",
    "client": "the client imports no server module",
    "client-layers": "the client's modules import downward only",
    "faces-through-service": "the HTTP faces and the app reach the store only",
    "no-web-framework-below-the-faces": "the core, ingest and services import no web framework",
    "store-through-protocols": "the service side uses only the store's protocols",
    "service-takes-no-http-model": "the service imports no HTTP model",
    "pure-rules": "the rules and the adapters do no I/O",
    "adapters-independent": "each adapter stands alone",
    "integrations": "the SDK integrations are client side",
}


# Imports that were allowed until issue 23's seams were mended: the arrows that ran upward (the
# store building the webhook payload, and encoding its commit notices, with modules of the layers
# above it), which no `ignore_imports` line excuses any more, and the run service's whole Store
# (it names the protocols it uses now).
MENDED_ARROWS = [
    ("layers", "store/sql/writes.py", "import lastword.webhooks.rules\n"),
    ("layers", "store/postgres/store.py", "import lastword.fanout.notify\n"),
    ("store-through-protocols", "service.py", "import lastword.store.base\n"),
]


@pytest.mark.parametrize(("contract", "module", "line"),
                         [(contract, *BREAKS[contract]) for contract in sorted(BREAKS)] + MENDED_ARROWS)
def test_each_contract_fails_when_broken(contract: str, module: str, line: str, tmp_path: Path) -> None:
    copy = tmp_path / "app" / "lastword"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "static"))
    target = copy / module
    source = target.read_text()
    # After the module docstring and `from __future__`, where an import is legal.
    anchor = "from __future__ import annotations\n"
    assert anchor in source, module
    target.write_text(source.replace(anchor, anchor + line, 1))
    checked = lint_imports(tmp_path / "app", tmp_path / "cache")
    assert checked.returncode != 0, checked.stdout[-2000:]
    broken = [row for row in checked.stdout.splitlines() if row.endswith("BROKEN") or " BROKEN " in row]
    assert len(broken) == 1 and CONTRACT_NAMES[contract] in broken[0], checked.stdout[-2000:]


def test_the_faces_reach_no_store_through_the_service() -> None:
    """No route, stream or app wiring reaches past the service to its store, hub or notices
    (an attribute path, which no import contract sees)."""
    for path in [*(PACKAGE / "http").glob("*.py"), PACKAGE / "main.py", PACKAGE / "server.py"]:
        source = path.read_text()
        assert not re.search(r"(\bservice|\))\.(store|_store|hub|_hub|_fanout)\b|\.notifier\b", source), path.name


def test_the_service_side_may_use_only_the_stores_protocols() -> None:
    """``store-through-protocols`` is an allow-list in effect: every store module is the protocols
    (or the package itself) or lies under a module the contract forbids, so a new store module is
    forbidden to the service side until someone decides otherwise."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    forbidden = next(c for c in contracts if c["id"] == "store-through-protocols")["forbidden_modules"]
    allowed = {"lastword.store", "lastword.store.protocols"}
    for path in (PACKAGE / "store").rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        covered = module in allowed or any(module == name or module.startswith(name + ".") for name in forbidden)
        assert covered, f"{module} is neither the store's protocols nor forbidden to the service side"


def test_the_store_decides_nothing_about_runs() -> None:
    """The SQL store asks runstate; it raises no state error and sets no status of its own."""
    for path in (PACKAGE / "store").rglob("*.py"):
        source = path.read_text()
        assert not re.search(r"\b(RunEnded|TurnAlreadyEnded|NotContinuable|RunRunning|RunExists|EventIdConflict)\(",
                             source), path.name
        # Queries may select by status (the sweep's candidates, retention); none may set one.
        assert not re.search(r"\bstatus=['\"]|SET status = '", source), path.name


def test_the_rules_and_the_store_speak_no_http() -> None:
    """Below the faces no call is given an HTTP status or headers: a refusal says why (its class,
    a Durable Streams reason and facts) and a write what it did; each face makes the status."""
    for path in [*(PACKAGE / "rules").glob("*.py"), *(PACKAGE / "store").rglob("*.py"), PACKAGE / "ds_service.py",
                 PACKAGE / "service.py"]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.keyword):
                # A run's ``status`` is the domain's word ("running"); a number there is HTTP's.
                http = node.arg in ("status_code", "headers") or (
                    node.arg == "status" and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int))
                assert not http, f"{path.name}:{node.value.lineno}"
