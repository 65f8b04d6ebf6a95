"""Who may use what: routes and streams go through the service; the state machine touches no SQL."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "app" / "lastword"


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_routes_and_streams_use_the_service_only() -> None:
    """No route, stream or app wiring reaches past the service to its store, hub or notices."""
    for name in ("api.py", "streams.py", "main.py", "server.py", "ingest.py"):
        source = (PACKAGE / name).read_text()
        assert not re.search(r"(\bservice|\))\.(store|_store|hub|_hub|_fanout)\b|\.notifier\b", source), name
        assert not {m for m in imported_modules(PACKAGE / name) if m.startswith(("lastword.store.", "lastword.notify"))
                    and m != "lastword.store.factory"}, name


def test_the_state_machine_is_pure() -> None:
    """runstate and records import nothing that does I/O: no store, driver, HTTP or clock."""
    for name in ("runstate.py", "records.py"):
        modules = imported_modules(PACKAGE / name)
        assert not {m for m in modules if m.startswith(("lastword.store", "sqlite3", "psycopg", "fastapi",
                                                        "starlette", "time", "asyncio"))}, (name, modules)


def test_the_store_decides_nothing_about_runs() -> None:
    """The SQL store asks runstate; it raises no state error and sets no status of its own."""
    for path in (PACKAGE / "store").glob("*.py"):
        source = path.read_text()
        assert not re.search(r"\b(RunEnded|TurnAlreadyEnded|NotContinuable|RunRunning|RunExists|EventIdConflict)\(",
                             source), path.name
        # Queries may select by status (the sweep's candidates, retention); none may set one.
        assert not re.search(r"\bstatus=['\"]|SET status = '", source), path.name
