"""The application factory: ``create_app(settings)`` builds the app, its lifespan owns resources.

Nothing connects at import time; the lifespan opens the core (:mod:`lastword.core`: the store,
the start-up sweep that ends turns whose lease ran out while the service was down, the
background jobs) and closes it after shutdown. The app is a face: it holds no state of its own
beyond its MCP mount, and serves ``app.state.core``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.middleware.cors import CORSMiddleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from lastword import __version__
from lastword.errors import (
    PROBLEM_JSON,
    HttpError,
    LastwordError,
    MethodNotAllowed,
    NotFound,
    Unavailable,
    Unprocessable,
    problem_json,
)
from lastword.core import Core, open_core
from lastword.http.access import AccessControl
from lastword.http.api import PlainRoute, event_schema_components
from lastword.http.api import router as api_router
from lastword.http.api_docs import document
from lastword.http.dashboard import router as dashboard_router
from lastword.http.docs_pages import router as docs_router
from lastword.http import direct as direct_way
from lastword.http.direct import Direct
from lastword.http.ds import route as ds_route
from lastword.http.ds import stream_route
from lastword.http.head import HeadAsGet
from lastword.http.logs import RequestLog
from lastword.http.mcp_mount import McpMount
from lastword.http.same_origin import SameOriginWrites
from lastword.http.streams import router as stream_router
from lastword.metrics import Metrics
from lastword.schemas import Health, Problem
from lastword.settings import Settings

log = logging.getLogger("lastword")

def problem_response(error: LastwordError) -> Response:
    """The answer for ``error``: its problem document (every route's refusals come through here)."""
    headers = None if error.retry_after is None else {"Retry-After": str(error.retry_after)}
    return Response(problem_json(error), status_code=error.http_status, media_type=PROBLEM_JSON, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(LastwordError)
    async def ours(request: Request, error: LastwordError) -> Response:
        return problem_response(error)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> Response:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        return problem_response(Unprocessable(f"{field}: {first['msg']}", field=field))

    @app.exception_handler(StarletteHTTPException)
    async def http(request: Request, error: StarletteHTTPException) -> Response:
        detail = str(error.detail)
        refusal: LastwordError
        if error.status_code == 404:
            refusal = NotFound(detail)
        elif error.status_code == 405:
            refusal = MethodNotAllowed(detail)
        else:
            refusal = HttpError(detail, status=error.status_code)
        response = problem_response(refusal)
        if error.headers:
            response.headers.update(error.headers)  # 405 carries ``Allow`` (RFC 9110 §15.5.6)
        if error.status_code == 405:
            # Starlette's ``Allow`` names the first route on the path only; a path served by
            # several routes (GET and POST /v1/runs) must list them all.
            methods = {method for method in ("GET", "POST", "PUT", "PATCH", "DELETE")
                       if any(route.matches({**request.scope, "method": method})[0] is Match.FULL
                              for route in request.app.router.routes)}
            if "GET" in methods:
                methods.add("HEAD")  # lastword.http.head answers HEAD wherever GET is served
            if methods:
                response.headers["Allow"] = ", ".join(sorted(methods))
        return response

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> Response:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem_response(LastwordError("the service failed; see its log"))


def _loopback(host: str) -> bool:
    """Whether ``LASTWORD_HOST`` is reachable from this machine only."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schema.setdefault("components", {}).setdefault("schemas", {}).update(event_schema_components())
        schema["components"]["schemas"].setdefault("Problem", Problem.model_json_schema())
        app.openapi_schema = document(schema)
    return app.openapi_schema


class StartupRefused(Exception):
    """The lifespan cannot start; why is already logged, in one line."""


class _QuietRefusal(logging.Filter):
    """Drops what uvicorn logs after a :class:`StartupRefused`: the traceback starlette hands it
    and "Application startup failed. Exiting." (the exit status, 3, says that)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (StartupRefused.__name__ in message or message.startswith("Application startup failed"))


_QUIET_REFUSAL = _QuietRefusal()


class App(FastAPI):
    """FastAPI, with a short way in for the appends a producer sends once per delta or message
    (``POST /ds/…``, ``…/events``, ``…/chunks``, ``…/end``: :mod:`lastword.http.direct`).

    FastAPI runs every request through its own layers (the server error middleware, its
    telemetry and body-limit middlewares, the exception middleware, an exit stack, the router,
    the route's request/response wrapper) around ours. Such an append goes through the server
    error middleware and the same middlewares of ours (:meth:`add_middleware`, in the same order)
    to :func:`lastword.http.direct.serve`, which runs the route with the app's exception
    handlers. So it is logged, checked for its origin and token, and refused or failed with the
    same answers; what it skips does nothing for it: FastAPI's telemetry is off (when it is on,
    every request takes FastAPI's way), no body limit of FastAPI's is set, no dependency is
    solved (the routes have none).
    """

    #: The routes the short way takes (set by :func:`create_app`, before the first request).
    directs: tuple[Direct, ...] = ()
    #: The way in for those (None: FastAPI's for every request), built with the middleware stack.
    _direct: ASGIApp | None = None
    #: The exception handlers the short way runs a route with.
    _handlers: dict[Any, Any] = {}

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        # FastAPI's telemetry is asked about once, here (the lifespan's start, before any
        # request), not per request, where it was a tenth of an append's time in the app: a
        # global OpenTelemetry provider is set before the app runs (by the SDK's instrumentation
        # or the code that starts it), and cannot be replaced once set.
        if (not self.directs or self.root_path or self.max_body_size is not None
                or self._native_telemetry.enabled()):
            self._direct = None
            return stack
        server_error = None
        handlers: dict[Any, Any] = {}
        for key, value in self.exception_handlers.items():
            if key in (500, Exception):
                server_error = value
            else:
                handlers[key] = value
        self._handlers = handlers
        direct: ASGIApp = self._serve_direct
        for cls, args, kwargs in reversed(self.user_middleware):
            direct = cls(direct, *args, **kwargs)
        self._direct = ServerErrorMiddleware(direct, handler=server_error, debug=self.debug)
        return stack

    async def _serve_direct(self, scope: Scope, receive: Receive, send: Send) -> None:
        route, params = scope.pop(_DIRECT_KEY)  # found by __call__, carried past the middlewares
        await direct_way.serve(scope, receive, send, route, params, handlers=self._handlers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "http" and scope["method"] == "POST" and MAX_BODY_SIZE_SCOPE_KEY not in scope
                and "fastapi.telemetry" not in scope):
            found = direct_way.find(self.directs, scope)
            if found is not None:
                if self.middleware_stack is None:
                    self.middleware_stack = self.build_middleware_stack()
                if self._direct is not None:
                    scope["app"] = self
                    scope.setdefault("router", self.router)
                    scope[_DIRECT_KEY] = found
                    await self._direct(scope, receive, send)
                    return
        await super().__call__(scope, receive, send)


#: Where :class:`App` hands the route it found to the end of its short way.
_DIRECT_KEY = "lastword.direct"


def create_app(settings: Settings | None = None, *, clock: Callable[[], float] = time.time,
               core: Core | None = None) -> FastAPI:
    """The app for ``settings``. Its lifespan opens the core (:func:`lastword.core.open_core`)
    and closes it after shutdown; given an open ``core``, the app serves that one, and whoever
    opened it closes it. ``clock`` (seconds since the epoch) is the time that leases,
    timestamps and retention are reckoned by: tests pass one they advance themselves."""
    settings = core.settings if core is not None else settings or Settings()
    counters = core.metrics if core is not None else Metrics()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as opened:
            if core is not None:
                app.state.core = core
            else:
                try:
                    app.state.core = await opened.enter_async_context(
                        open_core(settings, clock=clock, metrics=counters))
                except Unavailable as error:
                    # One line that says what to do, and nothing after it but the exit status.
                    log.error("cannot start: %s", error.detail)
                    logging.getLogger("uvicorn.error").addFilter(_QUIET_REFUSAL)
                    raise StartupRefused(error.detail) from None
            opened.push_async_callback(app.state.mcp.close)  # before the core: its sessions use it
            yield

    app = App(
        title="lastword",
        version=__version__,
        description="Keeps a subagent's last word: one selection rule, served over REST and SSE. "
                    "[The dashboard](/dashboard) shows the runs live.",
        lifespan=lifespan,
        # FastAPI's pages load their scripts from a CDN; ours serve them from a package.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = counters
    # First: a /ds request (one per message of a token stream) is not tried against every /v1
    # route before its own; no other route's path starts with /ds/.
    app.router.routes.append(ds_route)
    app.include_router(api_router)
    # The appends a producer sends once per delta or message take the short way in. No route
    # before them takes a POST to their paths: /ds/ is the first route, and the API's are the
    # only others under /v1/runs/ (tests/test_direct_routes.py holds FastAPI's router to that).
    app.directs = (direct_way.direct(ds_route, stream_route),
                   *(direct_way.direct(route, route.get_route_handler())
                     for route in api_router.routes if isinstance(route, PlainRoute)))
    app.include_router(stream_router)
    app.include_router(dashboard_router)
    app.include_router(docs_router)
    app.state.mcp = McpMount(lambda: app.state.core.runs, settings)
    # A plain route, not a mount: a mount would answer ``/mcp`` with a redirect to ``/mcp/``.
    app.router.routes.append(Route("/mcp", app.state.mcp, methods=["GET", "POST", "DELETE"]))
    _install_error_handlers(app)
    # Added last, so outermost: CORS answers preflights before access control asks for a token,
    # and every request, refused or not, is logged with its id.
    app.add_middleware(HeadAsGet)  # innermost: access control and the log see HEAD as sent
    app.add_middleware(AccessControl, ingest_token=settings.token("ingest"), read_token=settings.token("read"))
    # Inside CORS (which answers the preflights of the origins it lists), ahead of the tokens:
    # a cross-site write is refused the same way whether or not tokens are set.
    app.add_middleware(SameOriginWrites, allowed_origins=settings.cors_origin_list)
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            expose_headers=["Retry-After"],
        )
    app.add_middleware(RequestLog)
    if settings.read_token is not None and settings.ingest_token is None:
        log.warning("LASTWORD_READ_TOKEN is set but LASTWORD_INGEST_TOKEN is not: ingest is open")
    if settings.ingest_token is None and not _loopback(settings.host):
        log.warning(
            "LASTWORD_HOST is %s, which others can reach, and LASTWORD_INGEST_TOKEN is not set: anyone who reaches "
            "it can create, end and write runs and start webhooks; set the tokens or listen on 127.0.0.1",
            settings.host)

    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers (kept as it was; probes should use ``/livez``)."""
        return {"status": "ok"}

    @app.get("/livez", response_model=Health, tags=["health"])
    async def livez() -> dict[str, str]:
        """Liveness: the process can serve. Nothing else is checked: a database outage must
        not get a healthy replica restarted."""
        return {"status": "ok"}

    @app.get("/readyz", response_model=Health, tags=["health"], responses={503: {
        "model": Problem, "description": "Not ready: the store or the notices cannot be reached "
        "(`store_unavailable`, `notices_unavailable`), or the replica is draining (`draining`)."}})
    async def readyz(request: Request) -> Any:
        """Readiness: the store answers and the replica is not draining."""
        try:
            await request.app.state.core.runs.ready()
        except Unavailable as error:
            return problem_response(error)
        return {"status": "ready"}

    @app.get("/metrics", tags=["health"], response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    async def metrics(request: Request) -> Response:
        """Prometheus metrics."""
        metrics, service = request.app.state.metrics, request.app.state.core.runs
        metrics.count_runs(await service.reads.count_runs())
        # Ages on the clock the service runs by (injected in tests), as leases are.
        metrics.count_outbox(*await service.outbox_stats(), service.clock())
        metrics.result_waiters.set(service.result_waiters)
        metrics.result_polls_waiting.set(service.result_polls_waiting)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app
