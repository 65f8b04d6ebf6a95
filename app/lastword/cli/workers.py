"""``lastword serve --workers N``: N processes serving one port, each a full replica.

One process runs on one GIL; the workers use every core. Each worker is ``lastword serve`` as
it is — its own core (:func:`lastword.core.open_core`), event loop, store connections and fan-out,
the same drain — and they are replicas of one another: on PostgreSQL through LISTEN/NOTIFY as
separate replicas always were, on SQLite through the shared file and its commit notices
(:mod:`lastword.fanout.data_version`, chosen by :mod:`lastword.registry` when ``workers > 1``).

The parent binds the port once and hands the listening socket down (``pass_fds``): every worker
accepts from the one socket. The alternative, each worker binding the port with
``SO_REUSEPORT``, spreads connections by a hash of their addresses over per-worker queues. The
one socket keeps three properties that loses: connections waiting to be accepted by a worker
that is killed (``kill -9``) or restarted stay in the queue for the others instead of being
reset; a busy worker is not handed its share of new connections regardless (an idle one
accepts first); and the port stays bound, so no other program can take it, while no worker is
up. What it costs is that every worker's loop is woken for each new connection and one wins
the accept: a cost per connection, not per request, and the clients of this service keep
their connections. Measured, with the exact commands, in docs/BENCHMARKS.md ("Workers").

The parent does nothing but supervise. It forwards SIGTERM and SIGINT to the workers (as
SIGTERM: each drains, SPEC §18) and exits 0 once all of them drained and exited 0 (a second
signal is forwarded too: the workers then exit at once, as one would). A worker that dies is
started again; one that dies before it is ready (its lifespan failed: the store cannot be
opened, say) counts against :data:`START_ATTEMPTS`, and a worker that could not start that
many times in a row stops the others and ends the parent with status 1. Workers run in a
process group of their own, so a terminal's Ctrl-C reaches the parent only, which forwards it
once; and each asks the kernel for SIGTERM should the parent die without telling it.

For tests, ``LASTWORD_WORKER_PORTS`` (comma-separated, one port per worker) gives each worker
a second listener of its own on ``LASTWORD_HOST``: a test then chooses which worker answers.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import select
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from types import FrameType

from lastword.settings import Settings

#: Times in a row a worker may die before it is ready before the parent gives up.
START_ATTEMPTS = 3
#: The test hook described above.
OWN_PORTS_ENV = "LASTWORD_WORKER_PORTS"
#: Connections the shared socket queues while every worker is busy (uvicorn's default).
BACKLOG = 2048
_READY = b"r"
_PR_SET_PDEATHSIG = 1


def _listen(host: str, port: int) -> socket.socket:
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(BACKLOG)
    return sock


@dataclass
class _Slot:
    index: int
    own: socket.socket | None
    process: subprocess.Popen[bytes] | None = None
    ready_fd: int | None = None
    ready: bool = False
    failed_starts: int = 0
    exit_codes: list[int] = field(default_factory=list)


class Supervisor:
    """Starts, restarts and stops the workers (see the module)."""

    def __init__(self, settings: Settings, listener: socket.socket, own: list[socket.socket]) -> None:
        self.settings = settings
        self.listener = listener
        self.slots = [_Slot(index, own[index] if own else None) for index in range(settings.workers)]
        self.stopping = False
        self.status = 0
        self._signals: list[int] = []

    def _spawn(self, slot: _Slot) -> None:
        read_fd, write_fd = os.pipe()
        fds = [self.listener.fileno(), write_fd] + ([slot.own.fileno()] if slot.own else [])
        command = [sys.executable, "-m", "lastword.cli.workers", "--listen", str(self.listener.fileno()),
                   "--ready", str(write_fd), "--index", str(slot.index)]
        if slot.own is not None:
            command += ["--own", str(slot.own.fileno())]
        env = dict(os.environ, LASTWORD_WORKERS=str(self.settings.workers),
                   LASTWORD_HOST=self.settings.host, LASTWORD_PORT=str(self.settings.port))
        try:
            slot.process = subprocess.Popen(command, pass_fds=fds, env=env, process_group=0)
        finally:
            os.close(write_fd)
        slot.ready_fd, slot.ready = read_fd, False

    def _signalled(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signum)

    def run(self) -> int:
        """Serve until told to stop; the exit status."""
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._signalled)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # only to wake the select
        for slot in self.slots:
            self._spawn(slot)
        while True:
            waiting = [slot.ready_fd for slot in self.slots if slot.ready_fd is not None]
            readable, _, _ = select.select([wake_r, *waiting], [], [])
            if wake_r in readable:
                os.read(wake_r, 512)
            for slot in self.slots:
                if slot.ready_fd is not None and slot.ready_fd in readable:
                    if os.read(slot.ready_fd, 1) == _READY:
                        slot.ready, slot.failed_starts = True, 0
                    os.close(slot.ready_fd)
                    slot.ready_fd = None
            while self._signals:
                self._signals.pop(0)
                self.stopping = True
                self._forward(signal.SIGTERM)
            for slot in self.slots:
                self._reap(slot)
            if self.stopping and all(slot.process is None for slot in self.slots):
                self.listener.close()
                return self.status

    def _forward(self, signum: int) -> None:
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signum)

    def _reap(self, slot: _Slot) -> None:
        process = slot.process
        if process is None or process.poll() is None:
            return
        code = process.returncode
        slot.exit_codes.append(code)
        slot.process = None
        if slot.ready_fd is not None:
            os.close(slot.ready_fd)
            slot.ready_fd = None
        if self.stopping:
            if code != 0:
                self.status = 1
            return
        if not slot.ready:
            slot.failed_starts += 1
            if slot.failed_starts >= START_ATTEMPTS:
                print(f"lastword serve: worker {slot.index} could not start ({START_ATTEMPTS} times, "
                      f"last exit status {code}); stopping", file=sys.stderr, flush=True)
                self.stopping, self.status = True, 1
                self._forward(signal.SIGTERM)
                return
        print(f"lastword serve: worker {slot.index} exited with status {code}; starting it again",
              file=sys.stderr, flush=True)
        self._spawn(slot)


def serve_workers(settings: Settings) -> int:
    """Serve ``settings`` with ``settings.workers`` processes; the exit status."""
    listener = _listen(settings.host, settings.port)
    ports = [int(port) for port in os.environ.get(OWN_PORTS_ENV, "").split(",") if port.strip()]
    if ports and len(ports) != settings.workers:
        print(f"lastword serve: {OWN_PORTS_ENV} names {len(ports)} ports for {settings.workers} workers",
              file=sys.stderr)
        return 2
    own = [_listen(settings.host, port) for port in ports]
    return Supervisor(settings, listener, own).run()


# -- a worker --------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask Linux for SIGTERM (a drain) should the parent die first; elsewhere nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def _worker(args: argparse.Namespace) -> int:
    from lastword.http.logs import configure_logging
    from lastword.server import LastwordServer, give_big_blocks_back, uvicorn_config

    _die_with_parent()
    give_big_blocks_back()
    settings = Settings()
    configure_logging(settings.log_level)
    sockets = [socket.socket(fileno=args.listen)]
    if args.own is not None:
        sockets.append(socket.socket(fileno=args.own))
    ready_fd: int = args.ready

    class Worker(LastwordServer):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets)
            if self.started:
                os.write(ready_fd, _READY)  # the parent counts it as started
                os.close(ready_fd)

    server = Worker(uvicorn_config(settings))
    gc.collect()
    gc.freeze()  # as ``lastword serve`` does (lastword.cli.commands)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    server.run(sockets)
    return 0 if server.started else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lastword-worker")
    parser.add_argument("--listen", type=int, required=True)
    parser.add_argument("--ready", type=int, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--own", type=int)
    return _worker(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
