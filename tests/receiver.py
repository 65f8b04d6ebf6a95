"""A real webhook receiver on loopback for the tests: records every request, answers as told."""

from __future__ import annotations

import queue
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.servers import free_port


@dataclass
class Received:
    webhook_id: str
    headers: dict[str, str]
    body: bytes
    client_port: int


@dataclass
class Answer:
    status: int = 200
    body: bytes = b"ok"
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None  # answer only once this is set


class Receiver:
    """Each request is recorded in ``requests`` (and put on ``arrivals``); ``answer`` decides the reply.

    It also counts, per ``webhook-id``, how many requests are in progress at once, the most ever
    (``max_concurrent``), which shows whether two senders ever attempted one delivery together.
    """

    def __init__(self, answer: Callable[[Received], Answer] | None = None) -> None:
        self.answer = answer or (lambda _: Answer())
        self.requests: list[Received] = []
        self.arrivals: queue.Queue[Received] = queue.Queue()
        self.in_progress: Counter[str] = Counter()
        self.max_concurrent: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the http.server convention
                length = int(self.headers.get("content-length", "0"))
                got = Received(self.headers.get("webhook-id", ""), {k.lower(): v for k, v in self.headers.items()},
                               self.rfile.read(length), self.client_address[1])
                with receiver.lock:
                    receiver.requests.append(got)
                    receiver.in_progress[got.webhook_id] += 1
                    receiver.max_concurrent[got.webhook_id] = max(
                        receiver.max_concurrent[got.webhook_id], receiver.in_progress[got.webhook_id])
                receiver.arrivals.put(got)
                try:
                    reply = receiver.answer(got)
                    if reply.hold is not None:
                        reply.hold.wait(60)
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with receiver.lock:
                        receiver.in_progress[got.webhook_id] -= 1

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def ids(self) -> list[str]:
        with self.lock:
            return [request.webhook_id for request in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
