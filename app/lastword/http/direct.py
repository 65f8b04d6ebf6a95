"""The short way in: the appends a producer sends once per delta or message, past FastAPI's router.

FastAPI matches a request against its routes one included router at a time, each route through
its own layers, and does it twice for a route in an included router (once to pick the router,
once inside it): for a one-delta ``POST …/events`` that was a quarter of the request's cost in
the app (docs/BENCHMARKS.md). :class:`lastword.main.App` sends the requests these routes take
here instead, through the same middlewares as every request; :func:`serve` runs the route as
Starlette's router and ``request_response`` would (its path parameters, ``scope["route"]`` and
``scope["endpoint"]``, the app's exception handlers), and its answer is sent as it would be.

A route belongs here only if nothing FastAPI's router would try before it can take the same
request, and its handler answers with a whole response (no stream, no body sent in pieces),
which nothing can fail in the middle of.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.convertors import PathConvertor, StringConvertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

Handler = Callable[[Request], Awaitable[Response]]
ErrorHandler = Callable[[Request, Exception], Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class Direct:
    """A route the short way takes ``POST`` requests to, and what answers them."""

    route: Route  # a Starlette route or an APIRoute: its path's regular expression and converters
    handler: Handler
    #: The literal start of the route's path, checked before its regular expression.
    prefix: str


def direct(route: Route, handler: Handler) -> Direct:
    """``route``, answered by ``handler`` (the endpoint as its route would call it). Its path
    parameters must be strings as matched (``str`` and ``path``): they are not converted."""
    if any(type(convertor) not in (StringConvertor, PathConvertor) for convertor in route.param_convertors.values()):
        raise TypeError(f"{route.path}: the short way takes only str and path parameters")
    return Direct(route, handler, route.path.split("{", 1)[0])


def find(directs: Iterable[Direct], scope: Scope) -> tuple[Direct, dict[str, Any]] | None:
    """The route of ``directs`` that takes this ``http`` request, with its path parameters, or
    ``None``: only ``POST``, and not under a ``root_path`` (which the router would strip first)."""
    if scope["method"] != "POST" or scope.get("root_path"):
        return None
    path: str = scope["path"]
    for candidate in directs:
        if path.startswith(candidate.prefix):
            found = candidate.route.path_regex.match(path)
            if found is not None:
                return candidate, found.groupdict()
    return None


async def serve(scope: Scope, receive: Receive, send: Send, found: Direct, params: dict[str, Any],
                handlers: Mapping[Any, ErrorHandler]) -> None:
    """Answer a request :func:`find` gave to ``found``, with the app's exception handlers
    (``handlers``: those of ``ExceptionMiddleware``, not the one for ``Exception``, which is the
    server error middleware's)."""
    scope["path_params"] = params
    scope["endpoint"] = found.route.endpoint
    scope["route"] = found.route
    request = Request(scope, receive, send)
    try:
        response = await found.handler(request)
    except Exception as error:
        handler = None
        if isinstance(error, HTTPException):
            handler = handlers.get(error.status_code)
        if handler is None:
            handler = next((handlers[kind] for kind in type(error).__mro__ if kind in handlers), None)
        if handler is None:
            raise
        response = await handler(request, error)
        error.__traceback__ = None
    await response(scope, receive, send)
