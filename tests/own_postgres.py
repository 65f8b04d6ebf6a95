"""A PostgreSQL server of a test's own, which the test may stop and start (the shared one it
must not): ``initdb`` into a fresh directory, ``pg_ctl`` on a free loopback port.

PostgreSQL refuses to run as root; as root the server runs as the ``postgres`` user (the
directory is handed to it). Without the binaries, the test using it is skipped.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.servers import free_port


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class OwnPostgres:
    """One throwaway cluster: :meth:`start`, :meth:`stop` (fast: sessions are cut), :meth:`remove`."""

    def __init__(self) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) on this machine")
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="lastword-own-postgres-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin_dir / tool), *args]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", options, "-w",
                  "-t", "60", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
