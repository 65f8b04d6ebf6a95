"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), with their scripts and styles served from here.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so a sidecar in a cluster without
internet shows a blank page. These are the same pages (FastAPI's templates) pointed at files
under ``/docs/assets/``, which come from the ``fastapi-offline`` package (pinned in
``pyproject.toml``: it ships the two bundles and a favicon; this module uses its files, not its
code). ReDoc's Google Fonts link is left out: the page falls back to the
system's fonts. The pages' Content-Security-Policy keeps the browser on this origin, so nothing
the bundles name elsewhere (ReDoc's footer logo) is even asked for: no lookup of an outside name
from a cluster that has none. The bundles need inline scripts and styles (Swagger UI's start-up
script, ReDoc's generated styles) and ``eval`` (ReDoc compiles the schemas it validates).

Like the dashboard, the pages and the assets are open: they hold no data, and ``/openapi.json``
is open too.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

router = APIRouter(include_in_schema=False)

#: The files the two pages load, with their media types; anything else under /docs/assets/ is a 404.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
#: The assets change only with the pinned package, so a browser may keep them for a day.
CACHE = {"Cache-Control": "public, max-age=86400"}


def _root(request: Request) -> str:
    root_path: str = request.scope.get("root_path", "")
    return root_path.rstrip("/")


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = _root(request)
    page = get_swagger_ui_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
        swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
        swagger_favicon_url=f"{root}/docs/assets/favicon.png",
    )
    page.headers.update(HEADERS)
    return page


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = _root(request)
    page = get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}/docs/assets/redoc.standalone.js",
        redoc_favicon_url=f"{root}/docs/assets/favicon.png",
        with_google_fonts=False,
    )
    page.headers.update(HEADERS)
    return page


@router.get("/docs/assets/{name}")
async def asset(name: str) -> Response:
    media_type = ASSETS.get(name)
    if media_type is None:
        return Response(status_code=404)
    body = resources.files("fastapi_offline").joinpath("static", name).read_bytes()
    return Response(body, media_type=media_type, headers={**CACHE, "X-Content-Type-Options": "nosniff"})
