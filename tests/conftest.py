"""Fixtures: a real server per test on each storage backend.

``backend_settings`` is parametrised over every backend this machine can run; the HTTP suite
uses it through ``base_url``/``api``, so one suite covers SQLite and PostgreSQL alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.servers import threaded_server

BACKENDS = ["sqlite"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, tmp_path: Path) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'lastword.db'}"
    raise AssertionError(backend)


@pytest.fixture
def make_settings(database_url: str) -> Any:
    """Settings on this test's fresh database, with overrides."""

    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {"database_url": database_url, "keepalive_seconds": 1.0}
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def base_url(make_settings: Any) -> Iterator[str]:
    with threaded_server(make_settings()) as url:
        yield url


@pytest.fixture
def api(base_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        yield client
