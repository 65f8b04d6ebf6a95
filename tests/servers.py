"""Real lastword servers for tests: in a thread (most tests) or as a subprocess (crash tests)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from lastword.server import LastwordServer, uvicorn_config
from lastword.settings import Settings


#: Ports handed to servers the tests start: below Linux's ephemeral range (32768-60999 by
#: default). A port the kernel picked from that range (bind to 0) and let go could be taken again,
#: before the server binds it, by any outgoing connection of the many clients running meanwhile;
#: seen as "address already in use" when several suites shared the machine.
SERVER_PORTS = range(20000, 32768)


def free_port() -> int:
    """A port nothing listens on now, for a server a test is about to start."""
    while True:
        port = random.choice(SERVER_PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


class ThreadedServer(LastwordServer):
    """``LastwordServer`` that a test can stop without waiting for uvicorn's next tick.

    uvicorn looks at ``should_exit`` every 0.1 s; with hundreds of servers started and stopped
    per run, those waits added up to minutes of the suite. :meth:`stop` wakes the loop at once.
    Everything else (the drain, the lifespan) is the real server's."""

    _wake: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864_000
            try:
                await asyncio.wait_for(self._wake.wait(), 0.1)
            except TimeoutError:
                pass
            should_exit = await self.on_tick(counter)

    def stop(self) -> None:
        self.should_exit = True
        if self._loop is not None and self._wake is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:
                pass  # the loop has already closed


@contextmanager
def threaded_server(settings: Settings, clock: Callable[[], float] = time.time) -> Iterator[str]:
    """Serve ``create_app(settings, clock=clock)`` with uvicorn on a free port; yields the base URL."""
    with threaded_app_server(settings, clock) as (url, _app):
        yield url


@contextmanager
def threaded_app_server(settings: Settings, clock: Callable[[], float] = time.time) -> Iterator[tuple[str, Any]]:
    """:func:`threaded_server`, yielding the app too (its ``state.core`` once started), for
    tests that order an event inside the server with a hook."""
    # The socket is bound here and handed to uvicorn: a port picked free and bound later can be
    # taken in between (another xdist worker's outgoing connection draws from the same range),
    # and the server then fails to start ("address already in use").
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        port = int(listener.getsockname()[1])
        config = uvicorn_config(settings, clock=clock, host="127.0.0.1", port=port, log_level="warning",
                                timeout_graceful_shutdown=1)
        server = ThreadedServer(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
        thread.start()
        # A readiness bound, not a speed assertion: on a loaded machine a PostgreSQL start (its
        # migrations) took longer than 15 s, and the thread went on starting against a schema the
        # test had already dropped.
        deadline = time.monotonic() + 60
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                server.should_exit = True
                thread.join(timeout=60)
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}", config.app
        finally:
            server.stop()
            thread.join(timeout=15)


class ServerProcess:
    """``lastword serve`` in its own process, so a test can ``kill -9`` and restart it."""

    def __init__(self, env: dict[str, str], cwd: Path, command: list[str] | None = None) -> None:
        self.port = free_port()
        self.env = {**os.environ, **env, "LASTWORD_PORT": str(self.port), "LASTWORD_HOST": "127.0.0.1"}
        self.cwd = cwd
        #: What runs the server: ``lastword serve`` unless a test names its own launcher.
        self.command = command or [sys.executable, "-m", "lastword.cli", "serve"]
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"http://127.0.0.1:{self.port}"
        # One file per server object: its restarts append to it, nothing else does.
        handle, name = tempfile.mkstemp(prefix=f"lastword-test-server-{self.port}-", suffix=".log")
        os.close(handle)
        self.log_path = Path(name)

    def start(self, timeout: float = 60) -> ServerProcess:
        # The log goes to a file: a pipe nobody drains fills up and blocks the server.
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in _reap()
        self.process = subprocess.Popen(
            self.command, env=self.env, cwd=self.cwd,
            stdout=subprocess.DEVNULL, stderr=self._log,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._reap()
                raise RuntimeError(f"server exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"server did not become ready: {self.log_path.read_text()[-2000:]}")

    def _reap(self) -> None:
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()

    def kill(self) -> None:
        """``kill -9``: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self._reap()

    def close(self) -> None:
        """Stop it (for ``contextlib.closing``)."""
        self.stop()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reap()


@contextmanager
def running(servers: list[ServerProcess]) -> Iterator[list[ServerProcess]]:
    """``servers`` started, in order, and stopped at the end."""
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def stop(process: subprocess.Popen[Any], timeout: float = 20) -> None:
    """SIGTERM ``process`` (a server drains), then SIGKILL it if it has not exited within ``timeout``."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
