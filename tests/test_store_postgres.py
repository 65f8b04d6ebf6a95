"""The storage contract (``tests.store_contract``) on PostgreSQL: a fresh schema per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import postgres_schema
from tests.store_contract import StoreContract


@pytest.mark.postgres
class TestPostgresStore(StoreContract):
    @pytest.fixture
    def database_url(self) -> Iterator[str]:
        with postgres_schema() as url:
            yield url
