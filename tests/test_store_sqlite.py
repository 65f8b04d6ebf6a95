"""The storage contract (``tests.store_contract``) on SQLite: a fresh database file per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.store_contract import StoreContract


class TestSQLiteStore(StoreContract):
    @pytest.fixture
    def database_url(self, tmp_path: Path) -> Iterator[str]:
        yield f"sqlite:///{tmp_path / 'lastword.db'}"
