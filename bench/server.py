"""Real lastword servers for the benchmarks: ``python -m lastword.cli serve`` on loopback.

The code served is this tree's, or the checkout ``python -m bench.ab`` names (:func:`code_under_test`).

Each server is its own process (uvicorn, one worker, as the README runs it) with a temporary
SQLite file, or the PostgreSQL URL it is given. Its resident memory is read from
``/proc/PID/status``, and a profiler (py-spy) can be attached to it for the timed part of a
scenario.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent

#: ``python -m bench.ab`` points these at another checkout (and the interpreter that has its
#: dependencies), so that this tree's scenarios measure that tree's server.
TREE_VARIABLE = "LASTWORD_BENCH_TREE"
PYTHON_VARIABLE = "LASTWORD_BENCH_PYTHON"


@dataclass(frozen=True)
class Code:
    """The lastword code a scenario measures: which checkout, which interpreter, which module."""

    tree: Path
    python: str

    @property
    def package(self) -> str:
        """``lastword`` (under ``app/``) since issue 23; ``app`` before it."""
        return "lastword" if (self.tree / "app" / "lastword").is_dir() else "app"

    @property
    def cli(self) -> list[str]:
        """The command that runs the command line (``serve``, ``run`` …) of this code."""
        return [self.python, "-m", f"{self.package}.cli"]

    def env(self, base: dict[str, str]) -> dict[str, str]:
        """``base`` with this checkout's package first on the import path."""
        path = self.tree / "app" if self.package == "lastword" else self.tree
        rest = [part for part in base.get("PYTHONPATH", "").split(os.pathsep) if part]
        return {**base, "PYTHONPATH": os.pathsep.join([str(path), *rest])}


def code_under_test() -> Code:
    """This tree and interpreter, unless ``LASTWORD_BENCH_TREE``/``_PYTHON`` name others."""
    tree = os.environ.get(TREE_VARIABLE)
    return Code(Path(tree).resolve() if tree else ROOT, os.environ.get(PYTHON_VARIABLE) or sys.executable)


#: Ports a first start tries before it gives up (each another free one).
_PORT_ATTEMPTS = 5


class _PortTaken(Exception):
    """The server could not bind its port: another process took it after :func:`free_port`."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """Resident memory of a process (``VmRSS``; ``VmHWM``: its peak so far), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for pid {pid}")


class Server:
    """One ``lastword serve`` process; ``start()`` returns once ``/readyz`` answers 200."""

    def __init__(
        self,
        *,
        database_url: str | None = None,
        durability: str = "normal",
        env: dict[str, str] | None = None,
        workdir: Path | None = None,
        launcher: list[str] | None = None,
        workers: str | None = None,
    ) -> None:
        """``workers``: ``lastword serve --workers`` (default: ``LASTWORD_WORKERS`` as set, else 1)."""
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="lastword-bench-"))
        self.database_url = database_url or f"sqlite:///{self.workdir / 'bench.db'}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.code = code_under_test()
        self.env = {
            **self.code.env(dict(os.environ)),
            "LASTWORD_DATABASE_URL": self.database_url,
            "LASTWORD_DURABILITY": durability,
            "LASTWORD_HOST": "127.0.0.1",
            "LASTWORD_PORT": str(self.port),
            # Access logs would be a cost the service does not have in production behind a proxy.
            "LASTWORD_LOG_LEVEL": "warning",
            **(env or {}),
        }
        if workers is not None:
            self.env["LASTWORD_WORKERS"] = workers
        self.launcher = launcher or []  # e.g. py-spy record … -- (the server runs under it)
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.ready_seconds = 0.0
        self._log = self.workdir / f"server-{self.port}.log"

    @property
    def pid(self) -> int:
        """The server's own pid (not the launcher's)."""
        assert self.process is not None
        if not self.launcher:
            return self.process.pid
        import psutil

        launcher = psutil.Process(self.process.pid)
        for child in launcher.children(recursive=True):
            if f"{self.code.package}.cli" in child.cmdline():
                return int(child.pid)
        if f"{self.code.package}.cli" in launcher.cmdline():
            return self.process.pid  # a launcher that runs the server in its own process (valgrind)
        raise RuntimeError("the server process is not running under its launcher")

    def start(self, timeout: float = 120.0) -> Server:
        """Start the process and wait for ``/readyz``; ``ready_seconds`` is how long that took.

        Ready means answered by this process, listening on its port: between :func:`free_port`
        and the server's bind, another process (another bench run's server) may take the port,
        and its ``/readyz`` would answer for ours. A first start that finds its port taken
        starts again on another (a restart keeps its port: its clients know it).
        """
        for attempt in range(_PORT_ATTEMPTS):
            try:
                return self._start(timeout)
            except _PortTaken:
                if attempt == _PORT_ATTEMPTS - 1 or self.ready_seconds:
                    raise
                self.stop()
                self._move(free_port())
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> Server:
        self.started_at = time.perf_counter()
        with open(self._log, "ab") as log:
            self.process = subprocess.Popen(
                [*self.launcher, *self.code.cli, "serve"],
                env=self.env, cwd=self.code.tree, stdout=subprocess.DEVNULL, stderr=log,
            )
        deadline = self.started_at + timeout
        with httpx.Client(timeout=2.0) as client:
            while time.perf_counter() < deadline:
                if self.process.poll() is not None:
                    if "already in use" in self.log_tail().lower():  # lastword's own words, or the OS's
                        raise _PortTaken(self.port)
                    raise RuntimeError(f"the server exited ({self.process.returncode}): {self.log_tail()}")
                try:
                    if client.get(self.url + "/readyz").status_code == 200 and self._listening():
                        self.ready_seconds = time.perf_counter() - self.started_at
                        return self
                except httpx.TransportError:
                    pass
                time.sleep(0.005)
        self.stop()
        raise RuntimeError(f"the server was not ready within {timeout:.0f} s: {self.log_tail()}")

    def _listening(self) -> bool:
        """Whether this server's own process listens on its port (not another one that took it)."""
        import psutil

        try:
            sockets = psutil.Process(self.pid).net_connections("tcp")
        except (psutil.Error, RuntimeError):  # gone, or not yet started under its launcher
            return False
        return any(sock.status == psutil.CONN_LISTEN and sock.laddr and sock.laddr.port == self.port for sock in sockets)

    def _move(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.env["LASTWORD_PORT"] = str(port)
        self._log = self.workdir / f"server-{port}.log"

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self._log.read_text(errors="replace")[-chars:].strip() or "(no output)"
        except OSError:
            return "(no log)"

    def cpu_seconds(self) -> float:
        """User and system CPU time of the server so far (a profiler it runs under included)."""
        import psutil

        process = psutil.Process(self.pid)
        total = sum(process.cpu_times()[:2])
        for child in process.children(recursive=True):
            total += sum(child.cpu_times()[:2])
        return float(total)

    def rss(self) -> int:
        return rss_bytes(self.pid)

    def kill(self) -> None:
        """``kill -9``: nothing of the shutdown runs."""
        if self.process is not None and self.process.poll() is None:
            if self.launcher:
                with contextlib.suppress(RuntimeError, OSError):
                    os.kill(self.pid, signal.SIGKILL)
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            if self.launcher:
                # Stop the server itself; the launcher (a profiler) then writes what it saw and exits.
                with contextlib.suppress(RuntimeError, OSError):
                    os.kill(self.pid, signal.SIGTERM)
            else:
                self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Server:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class Profiler:
    """py-spy attached to a server for a stretch of a scenario (``--profile``).

    Writes collapsed stacks (``--format raw``) to ``bench/results/profiles/NAME.txt``;
    :mod:`bench.profiles` summarises them.
    """

    def __init__(self, directory: Path | None, extra: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.extra = extra  # more py-spy options, e.g. ("--gil",) or ("--idle",)

    def launcher(self, name: str) -> list[str] | None:
        """A command prefix that runs a server under py-spy from its first instruction (for start-up)."""
        spy = self._spy()
        if self.directory is None or spy is None:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        return [spy, "record", "--format", "raw", "--rate", "250", "--threads", *self.extra,
                "-o", str(self.directory / f"{name}.txt"), "--"]

    def _spy(self) -> str | None:
        return shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")

    @contextlib.contextmanager
    def attach(self, server: Server, name: str) -> Iterator[None]:
        if self.directory is None:
            yield
            return
        spy = self._spy()
        if spy is None:
            print(f"  (profile {name}: py-spy is not installed; pip install -e '.[bench]')")
            yield
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        output = self.directory / f"{name}.txt"
        process = subprocess.Popen(
            [spy, "record", "--pid", str(server.pid), "--format", "raw", "--rate", "250",
             "--threads", *self.extra, "-o", str(output)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        time.sleep(0.3)  # let it attach before the timed part starts
        try:
            yield
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
            shown = output.relative_to(ROOT) if output.is_relative_to(ROOT) else output
            print(f"  profile written: {shown}")
