"""The storage contract (``tests.store_contract``), each protocol's suite, on PostgreSQL: a fresh
schema per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import postgres_schema
from tests.store_contract import (
    FeedContract,
    LifetimeContract,
    OutboxContract,
    RetentionContract,
    RunLogContract,
    StatsContract,
)


class PostgresDatabase:
    @pytest.fixture
    def database_url(self) -> Iterator[str]:
        with postgres_schema() as url:
            yield url


@pytest.mark.postgres
class TestPostgresRunLog(PostgresDatabase, RunLogContract):
    pass


@pytest.mark.postgres
class TestPostgresFeed(PostgresDatabase, FeedContract):
    pass


@pytest.mark.postgres
class TestPostgresOutbox(PostgresDatabase, OutboxContract):
    pass


@pytest.mark.postgres
class TestPostgresRetention(PostgresDatabase, RetentionContract):
    pass


@pytest.mark.postgres
class TestPostgresStats(PostgresDatabase, StatsContract):
    pass


@pytest.mark.postgres
class TestPostgresLifetime(PostgresDatabase, LifetimeContract):
    pass
