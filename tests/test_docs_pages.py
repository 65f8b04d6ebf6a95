"""The API docs (``/docs``, Swagger UI; ``/redoc``, ReDoc) render in Chromium with no network.

A sidecar in a cluster without internet must still show its API docs: every request the pages
make that is not to the server's own origin is blocked (and recorded), and the pages must
render the operations all the same, having asked for nothing outside.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from lastword.settings import Settings
from playwright.sync_api import expect

from tests.servers import threaded_server
from tests.test_dashboard import VIEWPORT, browser  # noqa: F401  (the module's Chromium fixture)

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def docs_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    database = tmp_path_factory.mktemp("docs") / "lastword.db"
    with threaded_server(Settings(database_url=f"sqlite:///{database}")) as url:
        yield url


class OfflineTab:
    """A page whose every request off the server's origin is blocked, as on a cut-off network."""

    def __init__(self, chromium: Any, origin: str) -> None:
        self.context = chromium.new_context(viewport=VIEWPORT)
        self.blocked: list[str] = []
        self.errors: list[str] = []

        def route(route: Any) -> None:
            if route.request.url.startswith(origin + "/"):
                route.continue_()
            else:
                self.blocked.append(route.request.url)
                route.abort("internetdisconnected")

        self.context.route("**/*", route)
        self.page: Any = self.context.new_page()
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        # A script or style the page's policy refuses shows only on the console.
        self.page.on("console", self._console)

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def close(self) -> None:
        self.context.close()


def test_swagger_ui_renders_offline(browser: Any, docs_url: str) -> None:  # noqa: F811
    """/docs shows the operations (and the Authorize button) with nothing fetched from outside."""
    tab = OfflineTab(browser, docs_url)
    try:
        tab.page.goto(docs_url + "/docs")
        expect(tab.page.locator(".swagger-ui .info .title")).to_contain_text("lastword")
        expect(tab.page.locator(".opblock-summary-path", has_text="/v1/runs/{runId}/result")).to_have_count(1)
        expect(tab.page.locator(".swagger-ui .authorize")).to_be_visible()
        assert tab.errors == [], tab.errors
        assert tab.blocked == [], tab.blocked
    finally:
        tab.close()


def test_redoc_renders_offline(browser: Any, docs_url: str) -> None:  # noqa: F811
    """/redoc shows the operations with nothing fetched from outside (no web fonts, no logo)."""
    tab = OfflineTab(browser, docs_url)
    try:
        tab.page.goto(docs_url + "/redoc")
        expect(tab.page.locator("h1").first).to_contain_text("lastword")
        expect(tab.page.get_by_text("/v1/runs/{runId}/result").first).to_be_attached()
        # ReDoc's footer names its logo on a CDN; the page's policy refuses it before any request.
        errors = [error for error in tab.errors if not ("logo-mini.svg" in error and "Content Security Policy" in error)]
        assert errors == [], errors
        assert tab.blocked == [], tab.blocked
    finally:
        tab.close()


def test_the_docs_assets_come_from_the_server(docs_url: str) -> None:
    """The pages name only this server's assets, and those are served with their media types."""
    with httpx.Client(base_url=docs_url, timeout=30) as http:
        for page in ("/docs", "/redoc"):
            html = http.get(page).text
            assert "https://" not in html and "http://" not in html, page
        for asset, media in (("swagger-ui-bundle.js", "text/javascript"), ("swagger-ui.css", "text/css"),
                             ("redoc.standalone.js", "text/javascript"), ("favicon.png", "image/png")):
            answer = http.get(f"/docs/assets/{asset}")
            assert answer.status_code == 200, asset
            assert answer.headers["content-type"].startswith(media), asset
        assert http.get("/docs/assets/..%2Fcore.py").status_code == 404
        assert http.get("/docs/assets/nothing.js").status_code == 404

