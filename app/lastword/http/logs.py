"""Structured logs: one JSON object per line, each request's lines tagged with its request id.

The request log is lastword's own (uvicorn's access log is turned off): it prints the path
without its query string, because a read may carry ``?access_token=`` there, and tokens are
never logged.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
import random
import re
import sys
import time
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
access_log = logging.getLogger("lastword.access")

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# Record attributes that are not extra context: the standard ones, and uvicorn's ANSI-coloured
# copy of its message, which is noise in a JSON line.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "color_message"}


class JsonFormatter(logging.Formatter):
    #: The last second formatted, and its text: a second's lines share it.
    _second: tuple[int, str] = (-1, "")

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": f"{self._stamp(record.created)}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        current = request_id.get()
        if current is not None:
            entry["requestId"] = current
        attributes = vars(record)
        # The standard attributes are most of a record's; they are told apart in C, so the loop
        # runs only over the extra context (in the order it was given).
        for key in itertools.filterfalse(_STANDARD.__contains__, attributes):
            if not key.startswith("_"):
                entry[key] = attributes[key]
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()

    def _stamp(self, created: float) -> str:
        """``created``'s date and time to the second, in UTC (the converter ``configure_logging`` sets)."""
        second = int(created)
        if self._second[0] != second:
            self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", self.converter(created)))
        return self._second[1]


def configure_logging(level: str) -> None:
    """JSON lines on stderr for lastword's and uvicorn's loggers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.formatter.converter = time.gmtime  # type: ignore[union-attr]
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # httpx logs every request's URL at INFO; a webhook URL can hold a receiver's own token.
    # Set here, with the rest of the process's logging, not when a module is imported.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # A line never prints where it was logged from, nor its thread or process: without these,
    # every record (one a request) walks the stack and asks for them, a sixth of its cost
    # (the logging HOWTO's "Optimization" names these switches).
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


#: The request ids' own generator: drawing from the ``random`` module's shared one would move
#: its state under whatever else in the process uses it (a property test drawing its cases).
_ids = random.Random()
# Reseeded in a forked child (as the ``random`` module's own is), so workers do not repeat each other.
os.register_at_fork(after_in_child=_ids.seed)


def new_request_id() -> str:
    """32 random hex digits, like a UUID's. Not ``uuid4()``: it reads ``os.urandom``, a system
    call that lets go of the GIL on every request, and getting it back waits on whatever thread
    took it (the SQLite writer). A request id only has to be unique, not unguessable."""
    return f"{_ids.getrandbits(128):032x}"


class RequestLog:
    """ASGI middleware: a request id per request (``X-Request-ID``), and one log line at its end."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers", ())).get(b"x-request-id", b"").decode("latin-1")
        current = given if _SAFE_ID.match(given) else new_request_id()
        token = request_id.set(current)
        started = time.perf_counter()
        status = 500

        async def tagged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", current.encode())]
            await send(message)

        try:
            await self.app(scope, receive, tagged)
        finally:
            if access_log.isEnabledFor(logging.INFO):  # as info() asks, before the line's fields are made
                access_log.info(
                    "%s %s %s", scope["method"], scope["path"], status,
                    extra={"method": scope["method"], "path": scope["path"], "status": status,
                           "durationMs": round((time.perf_counter() - started) * 1000, 2)},
                )
            request_id.reset(token)
