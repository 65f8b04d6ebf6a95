"""The dashboard: ``/dashboard``, a page the service serves from its own package.

Plain HTML, CSS and JavaScript under ``lastword/http/static/``: no build step, no CDN (the machines
it runs on may have no internet), nothing to install beyond the package. The page talks to the
public API only — ``GET /v1/runs`` by pages, ``/v1/stream`` and each run's stream for live
updates — so it shows nothing a client of the API could not see.

The page and its assets are open, like ``/docs``: they hold no data. The API calls the page makes
need the read token when tokens are on; the page asks for it and keeps it in the tab's
``sessionStorage``. The Content-Security-Policy allows scripts and styles from this origin only,
so a run id or an output shown on the page can never run as code.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

router = APIRouter(include_in_schema=False)

#: The assets the page loads, with their media types; anything else under /dashboard/ is a 404.
ASSETS = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
}

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the page's URLs can carry ?access_token= in its streams
    "Cache-Control": "no-cache",
}


def _asset(name: str) -> bytes:
    return resources.files("lastword.http").joinpath("static", name).read_bytes()


@router.get("/")
async def root() -> RedirectResponse:
    """The service's address opened in a browser shows the dashboard."""
    return RedirectResponse("/dashboard", status_code=307)


@router.get("/dashboard")
async def page() -> Response:
    return Response(_asset("dashboard.html"), media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/dashboard/")
async def page_with_slash() -> RedirectResponse:
    return RedirectResponse("/dashboard", status_code=308)


@router.get("/dashboard/{name}")
async def asset(name: str) -> Response:
    media_type = ASSETS.get(name)
    if media_type is None:
        return Response(status_code=404)
    return Response(_asset(name), media_type=media_type, headers=HEADERS)
