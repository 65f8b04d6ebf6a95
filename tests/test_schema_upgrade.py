"""A database written by the previous release (commit edc02be, schema version 6) is upgraded at
start-up and serves its runs as that release did (issue 23, seam 1: the run options became
columns of their own, filled in from each old run's stored request).

The databases were written by that release's own server (``tests/fixtures/release_edc02be/make.py``
says how): a SQLite file, and for PostgreSQL the tables and rows it left, replayed into a fresh
schema. ``served.json`` holds what that release answered for each run; the new code must answer
the same, then go on with the old runs as with new ones.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from lastword.settings import Settings

from tests.conftest import BACKENDS, postgres_schema
from tests.fixtures.release_edc02be.make import RUNS, segment, text
from tests.servers import threaded_server

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "release_edc02be"


@contextlib.contextmanager
def previous_release_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """A copy of the previous release's database on ``backend``; yields its URL."""
    if backend == "sqlite":
        path = tmp_path / "lastword.db"
        shutil.copyfile(FIXTURES / "lastword.db", path)
        yield f"sqlite:///{path}"
        return
    with postgres_schema() as url:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute((FIXTURES / "postgres.sql").read_text().encode())
        yield url


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_previous_releases_database_is_upgraded_and_serves_its_runs_unchanged(
    backend: str, tmp_path: Path
) -> None:
    served: dict[str, Any] = json.loads((FIXTURES / "served.json").read_text())[backend]
    with previous_release_database(backend, tmp_path) as url:
        with threaded_server(Settings(database_url=url, keepalive_seconds=1.0)) as base, \
                httpx.Client(base_url=base, timeout=30) as api:
            for path, answer in served.items():
                response = api.get(path)
                assert (response.status_code, response.json()) == (answer["status"], answer["body"]), path
            # The old runs go on as new ones would: the same create again is the same run...
            for body, _ in RUNS:
                again = api.post("/v1/runs", json={**body, "leaseSeconds": 0})
                assert again.status_code == 200, again.text
                assert again.json() == served[f"/v1/runs/{body['runId']}"]["body"]
            # ...a fork that joins continuations still joins them...
            api.post("/v1/runs/fork-joining/events", json=[segment("c", stop="end_turn")]).raise_for_status()
            joined = api.get("/v1/runs/fork-joining/result").json()["output"]
            assert joined == [text("a "), text("b"), text("c")]
            # ...and an old run can be forked, its options shown as asked.
            fork = api.post("/v1/runs", json={"runId": "new-fork", "forkOf": {"runId": "fork", "afterSeq": 4},
                                              "selection": {"joinContinuations": False}})
            assert fork.status_code == 201, fork.text
            assert (fork.json()["forkOf"], fork.json()["selection"]) == (
                {"runId": "fork", "afterSeq": 4}, {"joinContinuations": False})
