"""docs/STATUS.md lists what SPEC §12–§14 describe but the service does not do yet; it stays true.

Each row names an endpoint or a run option. A listed endpoint must be one the app does not
route, and a listed run option one that run creation refuses, so implementing a feature
without removing its row (or listing one that is not missing) fails here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from lastword.main import create_app
from lastword.schemas import RunCreate
from lastword.settings import Settings
from tests.api_helpers import assert_problem, shared_api, shared_base_url  # noqa: F401

STATUS = Path(__file__).resolve().parent.parent / "docs" / "STATUS.md"
ROW = re.compile(r"^\| (?P<feature>[^|]+) \| §(?P<section>1[234]) \| (?P<what>[^|]+) \|$", re.MULTILINE)


def _rows() -> list[tuple[str, str]]:
    rows = [(match["feature"].strip(), match["what"].strip()) for match in ROW.finditer(STATUS.read_text())]
    assert rows, "docs/STATUS.md lists nothing"
    return rows


def _document() -> dict[str, Any]:
    app = create_app(Settings(database_url="sqlite:///:memory:"))
    document: dict[str, Any] = app.openapi()
    return document


@pytest.mark.parametrize(("feature", "what"), [row for row in _rows() if not row[1].startswith("run option")])
def test_listed_endpoints_are_not_served(feature: str, what: str) -> None:
    """An endpoint listed as not implemented is not in the API (remove its row when it is)."""
    method, path = what.strip("`").split(" ", 1)
    operations = _document()["paths"].get(path, {})
    assert method.lower() not in operations, f"{feature} is implemented: remove its row from docs/STATUS.md"


@pytest.mark.parametrize(("feature", "what"), [row for row in _rows() if row[1].startswith("run option")])
def test_listed_run_options_are_refused(shared_api: httpx.Client, feature: str, what: str) -> None:
    """A run option listed as not implemented is not in the run's schema, and is refused with 422."""
    option = what.removeprefix("run option").strip().strip("`")
    assert option not in RunCreate.model_fields, f"{feature} is implemented: remove its row from docs/STATUS.md"
    problem = assert_problem(shared_api.post("/v1/runs", json={option: {}}), 422, "validation_error")
    assert option in problem["detail"], f"{feature}: {problem['detail']}"
