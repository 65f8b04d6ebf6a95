"""What every scenario is handed: the mode (full or quick), the profiler, and PostgreSQL access."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

from bench.server import Profiler

T = TypeVar("T")


class Skip(Exception):
    """A scenario (or part of one) cannot run here; the message says why."""


@dataclass
class Context:
    quick: bool
    postgres_url: str | None  # None: PostgreSQL figures are not wanted
    profiler: Profiler = field(default_factory=lambda: Profiler(None))
    _postgres_problem: str | None = None

    def pick(self, full: T, quick: T) -> T:
        return quick if self.quick else full

    def postgres_problem(self) -> str | None:
        """Why PostgreSQL figures cannot be had (None when they can); asked once per bench."""
        if self.postgres_url is None:
            return "no PostgreSQL URL (--postgres none)"
        if self._postgres_problem is None:
            self._postgres_problem = _probe_postgres(self.postgres_url) or ""
        return self._postgres_problem or None

    @contextlib.contextmanager
    def postgres_database(self) -> Iterator[str]:
        """A fresh database on the PostgreSQL server (dropped afterwards); its URL."""
        problem = self.postgres_problem()
        if problem:
            raise Skip(problem)
        assert self.postgres_url is not None
        import psycopg

        name = f"lastword_bench_{secrets.token_hex(4)}"
        with psycopg.connect(self.postgres_url, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
        parts = urlsplit(self.postgres_url)
        try:
            yield urlunsplit(parts._replace(path="/" + name))
        finally:
            with psycopg.connect(self.postgres_url, autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _probe_postgres(url: str) -> str | None:
    try:
        import lastword.store.postgres.store  # noqa: F401  (the backend may not exist yet)
    except ImportError as error:
        return f"the PostgreSQL backend does not import ({error})"
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3, autocommit=True) as connection:
            connection.execute("SELECT 1")
            allowed = connection.execute(
                "SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
            if not allowed or not allowed[0]:
                return f"the role of {url} may not create databases"
    except Exception as error:  # any failure to reach it is a reason to skip, said plainly
        return f"PostgreSQL at {url} does not answer: {error}"
    return None
