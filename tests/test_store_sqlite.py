"""The storage contract (``tests.store_contract``), each protocol's suite, on SQLite: a fresh
database file per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store_contract import (
    FeedContract,
    LifetimeContract,
    OutboxContract,
    RetentionContract,
    RunLogContract,
    StatsContract,
)


class SQLiteDatabase:
    @pytest.fixture
    def database_url(self, tmp_path: Path) -> Iterator[str]:
        yield f"sqlite:///{tmp_path / 'lastword.db'}"


class TestSQLiteRunLog(SQLiteDatabase, RunLogContract):
    pass


class TestSQLiteFeed(SQLiteDatabase, FeedContract):
    pass


class TestSQLiteOutbox(SQLiteDatabase, OutboxContract):
    pass


class TestSQLiteRetention(SQLiteDatabase, RetentionContract):
    pass


class TestSQLiteStats(SQLiteDatabase, StatsContract):
    pass


class TestSQLiteLifetime(SQLiteDatabase, LifetimeContract):
    pass
