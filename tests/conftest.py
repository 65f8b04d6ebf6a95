"""Fixtures: a real server per test on each storage backend.

``backend_settings`` is parametrised over every backend this machine can run; the HTTP suite
uses it through ``base_url``/``api``, so one suite covers SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import contextlib
import functools
import os
import queue
import re
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from lastword.settings import Settings
from psycopg import sql

from tests.servers import threaded_server
from tests.sse import WAIT_SECONDS

#: The PostgreSQL the ``postgres`` variants use; each test gets a fresh schema in it.
POSTGRES_URL = os.environ.get("LASTWORD_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
#: ``1`` (CI) turns "PostgreSQL is not reachable" from a skip into a failure.
REQUIRE_POSTGRES = os.environ.get("LASTWORD_REQUIRE_POSTGRES") == "1"

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@functools.cache
def postgres_unreachable() -> str | None:
    """Why the test PostgreSQL cannot be used, or None when it can (asked once per session)."""
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.Error as error:
        return " ".join(str(error).split()) or type(error).__name__
    return None


def require_postgres() -> None:
    """Skip (or, with ``LASTWORD_REQUIRE_POSTGRES=1``, fail) when PostgreSQL is not reachable."""
    reason = postgres_unreachable()
    if reason is None:
        return
    message = (
        f"PostgreSQL is not reachable at {re.sub(r':[^:@/]*@', ':***@', POSTGRES_URL)} ({reason}); "
        "to run the PostgreSQL variants, "
        "start one and set LASTWORD_TEST_POSTGRES_URL=postgresql://USER@HOST:PORT/DB "
        "(a database the tests may create schemas in)"
    )
    if REQUIRE_POSTGRES:
        pytest.fail(message + "; LASTWORD_REQUIRE_POSTGRES=1 makes this a failure", pytrace=False)
    pytest.skip(message)


def require(reason: str | None, variable: str) -> None:
    """Skip a test whose machine lacks what it needs (``reason``), or fail it when the
    environment variable ``variable`` is ``1`` (CI, where a skip would hide a broken harness)."""
    if reason is None:
        return
    if os.environ.get(variable) == "1":
        pytest.fail(f"{reason}; {variable}=1 makes this a failure", pytrace=False)
    pytest.skip(reason)


def with_search_path(url: str, schema: str) -> str:
    """``url`` whose sessions use ``schema`` (libpq's ``options``)."""
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}options=-csearch_path%3D{schema}"


class SchemaJanitor:
    """Drops the tests' PostgreSQL schemas on a thread of its own, in the order they were left.

    ``DROP SCHEMA … CASCADE`` of a used schema took 80-180 ms, paid by every PostgreSQL test
    while it stood idle; nothing waits for the drop but the end of the session."""

    def __init__(self) -> None:
        self._left: queue.Queue[str | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def drop(self, schema: str) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="schema-janitor", daemon=True)
                self._thread.start()
        self._left.put(schema)

    def finish(self) -> None:
        """Wait until every schema left so far is dropped."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._left.put(None)
            thread.join()

    def _work(self) -> None:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
            while (schema := self._left.get()) is not None:
                connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


JANITOR = SchemaJanitor()


def pytest_sessionfinish() -> None:
    JANITOR.finish()


#: Fixtures that give a test a database or a running server.
SERVER_FIXTURES = frozenset({"api", "base_url", "client", "shared_api", "shared_base_url", "database_url",
                             "make_settings", "backend", "server_process", "secured_url", "docs_url"})
#: Words in a test module's source that say its tests start processes or servers of their own,
#: or open a database.
PROCESS_WORDS = re.compile(r"ServerProcess|threaded_server|threaded_app_server|serving(_process)?\(|subprocess|"
                           r"Popen|run_cli|create_subprocess|\bServer\(|open_core|open_store|SqliteStore|"
                           r"PostgresStore|sqlite3|from bench\b|import bench\b")
#: Words that say a module drives the real agent CLIs (tests/cli_children).
CLI_WORDS = re.compile(r"run_cli|LASTWORD_REQUIRE_CLIS|node_modules/\.bin")


@functools.cache
def _module_needs(path: Path) -> tuple[bool, bool]:
    source = path.read_text()
    return bool(PROCESS_WORDS.search(source)), bool(CLI_WORDS.search(source))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what each test needs, so a run can pick (``pytest -m unit`` in well under a minute):
    ``unit`` needs nothing (no server, database, process, browser or CLI); ``server`` a database
    or a lastword server (in process or not); ``clis`` the real agent CLIs; ``browser``,
    ``container`` and ``postgres`` as their modules and parameters say."""
    for item in items:
        processes, clis = _module_needs(Path(str(item.fspath)))
        fixtures = set(getattr(item, "fixturenames", ()))
        if clis:
            item.add_marker(pytest.mark.clis)
        kinds = {mark.name for mark in item.iter_markers()}
        if processes or fixtures & SERVER_FIXTURES or kinds & {"postgres", "slow"}:
            item.add_marker(pytest.mark.server)
        elif not kinds & {"browser", "container", "clis"}:
            item.add_marker(pytest.mark.unit)


@contextlib.contextmanager
def postgres_schema() -> Iterator[str]:
    """A fresh schema for one test, dropped afterwards; yields a database URL that uses it."""
    require_postgres()
    schema = f"lw_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        yield with_search_path(POSTGRES_URL, schema)
    finally:
        JANITOR.drop(schema)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def database_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for this test: a SQLite file, or a PostgreSQL schema."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'lastword.db'}"
    elif backend == "postgres":
        with postgres_schema() as url:
            yield url
    else:
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


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def client(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """An async HTTP client on this test's server (for the SSE tests)."""
    async with httpx.AsyncClient(base_url=base_url, timeout=WAIT_SECONDS) as client:
        yield client
