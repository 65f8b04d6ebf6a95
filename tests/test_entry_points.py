"""Where a person starts: the service's address, the dashboard and the API docs lead to each other,
and ``lastword serve`` says where they are."""

from __future__ import annotations

from pathlib import Path

import httpx

from lastword.openapi import generate
from tests.servers import ServerProcess

REPO = Path(__file__).resolve().parents[1]


def test_the_root_leads_to_the_dashboard_and_the_dashboard_to_the_docs(api: httpx.Client) -> None:
    root = api.get("/", follow_redirects=False)
    assert root.status_code == 307 and root.headers["location"] == "/dashboard"
    assert 'href="/docs"' in api.get("/dashboard").text
    assert "(/dashboard)" in api.get("/openapi.json").json()["info"]["description"]


def test_every_operation_has_a_tag_and_none_is_default() -> None:
    """/docs groups the endpoints by what they are for; nothing lands under "default"."""
    untagged = [f"{method.upper()} {path}" for path, item in generate()["paths"].items()
                for method, operation in item.items() if not operation.get("tags")]
    assert untagged == []


def test_serve_says_where_the_dashboard_and_the_docs_are(tmp_path: Path) -> None:
    server = ServerProcess({"LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lw.db'}"}, cwd=REPO).start()
    try:
        log = server.log_path.read_text()
    finally:
        server.stop()
    assert f"{server.url}/dashboard" in log and f"{server.url}/docs" in log
