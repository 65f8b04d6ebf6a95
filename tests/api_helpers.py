"""Helpers for the HTTP suites: a server shared by a module's tests, and small request helpers.

Most HTTP tests only touch runs they create themselves (service-made ids), so they can share
one server per module and backend instead of starting one each; tests that look at the whole
database (listing, an empty store) use the per-test ``api`` fixture of ``conftest``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lastword.settings import Settings

from tests.builders import chunk, message, new_run, text
from tests.conftest import BACKENDS, postgres_schema
from tests.servers import ServerProcess, threaded_server

PROBLEM_JSON = "application/problem+json"

# The builders live in tests/builders.py; these names stay importable from here for the test
# modules (and branches) written against the old helpers. New tests import tests.builders.
create = new_run
__all__ = ["PROBLEM_JSON", "assert_problem", "chunk", "create", "ingested", "logged", "message", "of_type",
           "result", "serving", "serving_process", "shared_api", "shared_base_url", "text"]


@contextlib.contextmanager
def serving(backend: str, tmp_path_factory: pytest.TempPathFactory, **overrides: Any) -> Iterator[str]:
    """A server on a fresh database of ``backend`` with these settings; yields its base URL."""
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('shared') / 'lastword.db'}"
        else:
            url = stack.enter_context(postgres_schema())
        settings = Settings(**{"database_url": url, "keepalive_seconds": 1.0, **overrides})
        yield stack.enter_context(threaded_server(settings))


@contextlib.contextmanager
def serving_process(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``lastword serve`` in its own process on a fresh database of ``backend``; yields its URL.

    For hypothesis tests: hypothesis fails a test whose strategies change the global ``random``
    state while it draws, and a server thread in the test's process does exactly that at any
    moment (psycopg_pool jitters its connection timings with ``random.random()``).
    """
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('shared') / 'lastword.db'}"
        else:
            url = stack.enter_context(postgres_schema())
        server = ServerProcess({"LASTWORD_DATABASE_URL": url}, cwd=Path(__file__).resolve().parents[1])
        stack.callback(server.stop)
        yield server.start().url


@pytest.fixture(scope="module", params=BACKENDS)
def shared_base_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server for a module's tests on one backend (import it into the test module)."""
    with serving(request.param, tmp_path_factory) as url:
        yield url


@pytest.fixture
def shared_api(shared_base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=shared_base_url, timeout=30) as client:
        yield client


def accepted(response: httpx.Response) -> dict[str, Any]:
    """The answer to a request that must have been taken (200 or 201)."""
    assert response.status_code in (200, 201), response.text
    return dict(response.json())


def logged(api: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    """The run's whole log, as ``{seq, turn, receivedAt, event}`` items, page by page."""
    items: list[dict[str, Any]] = []
    after = 0
    while True:
        page = accepted(api.get(f"/v1/runs/{run_id}/events", params={"after": after, "limit": 1000}))
        if not page["events"]:
            return items
        items.extend(page["events"])
        after = page["nextAfter"]


def of_type(api: httpx.Client, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [item["event"] for item in logged(api, run_id) if item["event"]["type"] == kind]


def ingested(api: httpx.Client, run_id: str) -> list[dict[str, Any]]:
    """The events a producer sent, in log order (the service's lifecycle events left out)."""
    return [item["event"] for item in logged(api, run_id) if not item["event"]["type"].startswith("subagent/")]


def result(api: httpx.Client, run_id: str, **params: Any) -> dict[str, Any]:
    response = api.get(f"/v1/runs/{run_id}/result", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def assert_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The response is an RFC 9457 problem document with this status and code."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body = response.json()
    assert body["status"] == status
    assert body["code"] == code
    assert body["title"] and body["detail"]
    return dict(body)
