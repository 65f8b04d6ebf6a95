"""The container image, built from the Dockerfile and run for real (no Docker engine needed).

No Docker engine or image registry is reachable here, so the image is built with Debian's
buildah (``--isolation chroot``: no daemon, no cgroups) on a stand-in for python:3.11-slim that
.ci/container-base makes with debootstrap (Debian bookworm, Debian's Python 3.11), and each
container runs with ``buildah run --isolation chroot --network host``: the image's own command,
user, environment and ``/data`` volume (buildah gives each working container its own copy of
the image's ``/data``, as Docker does with a new named volume), on a free loopback port.

Needs root and the Debian packages buildah, podman and debootstrap (``.ci/run`` installs them);
without them these tests skip, or fail when ``LASTWORD_REQUIRE_CONTAINER=1`` (CI).
``LASTWORD_CONTAINER_BASE=python:3.11-slim`` builds on the real base where a registry answers.

The build time, the rebuild time after a source-only change and the image size are measured
here and printed (README "In a container" quotes them).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
import yaml

from tests.conftest import postgres_schema
from tests.servers import free_port
from tests.sse import open_stream, payload
from tests.test_demo import EXPECTED

pytestmark = [pytest.mark.slow, pytest.mark.container]

ROOT = Path(__file__).resolve().parent.parent
#: ``1`` (CI) turns "cannot build containers here" from a skip into a failure.
REQUIRE_CONTAINER = os.environ.get("LASTWORD_REQUIRE_CONTAINER") == "1"
TOOLS = ("buildah", "podman", "debootstrap")
#: What the build context holds (.dockerignore lets in no more than this).
CONTEXT = ("Dockerfile", ".dockerignore", "requirements.lock", "pyproject.toml", "README.md", "app")
#: Longest wait for a container's health check to pass, or for it to exit after SIGTERM.
WAIT_SECONDS = 60.0


def container_unavailable() -> str | None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install buildah podman debootstrap)"
    if os.geteuid() != 0:
        return "buildah --isolation chroot and debootstrap need root here"
    return None


def run(*command: str, timeout: float = 120) -> str:
    """``command``'s standard output; fails the test with its output when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def report(config: pytest.Config, line: str) -> None:
    """A line in pytest's output, shown even when the test passes."""
    reporter = config.pluginmanager.getplugin("terminalreporter")
    capture = config.pluginmanager.getplugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)


@pytest.fixture(scope="module")
def base_image() -> str:
    reason = container_unavailable()
    if reason is not None:
        if REQUIRE_CONTAINER:
            pytest.fail(f"cannot build the container here: {reason}; LASTWORD_REQUIRE_CONTAINER=1 makes this a failure")
        pytest.skip(f"cannot build the container here: {reason}")
    chosen = os.environ.get("LASTWORD_CONTAINER_BASE")
    if chosen:
        return chosen
    # Made once per machine and cached (debootstrap takes a few minutes the first time).
    return run("bash", str(ROOT / ".ci" / "container-base"), timeout=1800).strip().splitlines()[-1]


@dataclass
class Image:
    name: str
    size_bytes: int
    config: dict[str, Any]


def build(context: Path, base: str, tag: str) -> tuple[float, str]:
    """``buildah bud`` as CI runs it; the seconds it took and its log. ``--format docker``
    keeps the HEALTHCHECK (the OCI image format has no place for it)."""
    started = time.monotonic()
    log = run("buildah", "bud", "--isolation", "chroot", "--network", "host", "--format", "docker", "--layers",
              "--build-arg", f"BASE={base}", "--tag", tag, str(context), timeout=1800)
    return time.monotonic() - started, log


@pytest.fixture(scope="module")
def image(base_image: str, tmp_path_factory: pytest.TempPathFactory,
          pytestconfig: pytest.Config) -> Iterator[Image]:
    """The image, built twice: as found, then after a source-only change (timed, and the
    dependency layer must come from the cache)."""
    context = tmp_path_factory.mktemp("context")
    for name in CONTEXT:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, context / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, context / name)
    tag = f"localhost/lastword:test-{uuid.uuid4().hex[:12]}"
    built: list[str] = []
    try:
        seconds, first_log = build(context, base_image, tag)
        # Cold unless a layer cache was already there (another run's, on the same machine).
        kind = "build with a layer cache" if "Using cache" in first_log else "cold build"
        built.append(run("buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", tag).strip())
        with (context / "app" / "lastword" / "__init__.py").open("a") as module:
            module.write("# a source-only change\n")
        rebuild_seconds, log = build(context, base_image, tag)
        built.append(run("buildah", "inspect", "--type", "image", "--format", "{{.FromImageID}}", tag).strip())
        # The dependency layer was reused: only the steps from the source on ran again.
        steps = re.split(r"^STEP \d+/\d+: ", log, flags=re.M)
        install = next(step for step in steps if step.startswith("RUN") and "--require-hashes" in step)
        assert "Using cache" in install, install[-2000:]

        size = int(run("podman", "image", "inspect", "--format", "{{.Size}}", tag).strip())
        config = json.loads(run("buildah", "inspect", "--type", "image", tag))["Docker"]["config"]
        report(pytestconfig, f"\ncontainer image on {base_image}: {size / 1e6:.0f} MB; "
                             f"{kind} {seconds:.1f} s (the base at hand), "
                             f"rebuild after a source-only change {rebuild_seconds:.1f} s")
        yield Image(tag, size, config)
    finally:
        for image_id in built:
            subprocess.run(["buildah", "rmi", "--force", image_id], capture_output=True, timeout=120, check=False)


def serves(process: psutil.Process) -> bool:
    try:
        return "serve" in process.cmdline()
    except psutil.NoSuchProcess:
        return False


class Container:
    """A working container of the image, run like ``docker run --network host -e … IMAGE``."""

    def __init__(self, image: Image, env: dict[str, str], log_dir: Path) -> None:
        self.image = image
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.name = run("buildah", "from", "--pull=never", "--name", f"lastword-test-{uuid.uuid4().hex[:12]}",
                        image.name).strip()
        # Like `docker run -e`: the command, the health check and every exec see these.
        settings = {**env, "LASTWORD_HOST": "127.0.0.1", "LASTWORD_PORT": str(self.port)}
        run("buildah", "config", *(f"--env={key}={value}" for key, value in settings.items()), self.name)
        self.log_path = log_dir / f"{self.name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def command(self, *argv: str) -> list[str]:
        return ["buildah", "run", "--isolation", "chroot", "--network", "host", self.name, "--", *argv]

    def exec(self, *argv: str) -> str:
        """``docker exec``: a command in the running container, as the image's user."""
        return run(*self.command(*argv))

    def start(self) -> None:
        """Run the image's own command (ENTRYPOINT + CMD)."""
        argv = [*(self.image.config.get("Entrypoint") or []), *(self.image.config.get("Cmd") or [])]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command(*argv), stdout=log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def server(self) -> psutil.Process:
        """The process of the image's command (what Docker would run as PID 1)."""
        assert self.process is not None
        deadline = time.monotonic() + WAIT_SECONDS
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the container exited {self.process.returncode}:\n{self.log()}"
            # buildah's own chroot helper carries the same arguments: the server is the
            # innermost process that has them.
            serving = [child for child in psutil.Process(self.process.pid).children(recursive=True)
                       if serves(child)]
            innermost = [child for child in serving if not any(serves(c) for c in child.children())]
            if len(innermost) == 1:
                return innermost[0]
            time.sleep(0.1)
        raise AssertionError(f"no server process in the container:\n{self.log()}")

    def healthcheck(self) -> int:
        """The image's HEALTHCHECK command, run in the container; its exit status."""
        test = self.image.config["Healthcheck"]["Test"]
        argv = test[1:] if test[0] == "CMD" else ["/bin/sh", "-c", test[1]]
        timeout = self.image.config["Healthcheck"]["Timeout"] / 1e9
        done = subprocess.run(self.command(*argv), capture_output=True, timeout=timeout + 30, check=False)
        return done.returncode

    def wait_healthy(self) -> None:
        """Until the health check passes, as Docker's would mark the container healthy."""
        assert self.process is not None
        deadline = time.monotonic() + WAIT_SECONDS
        while self.healthcheck() != 0:
            assert self.process.poll() is None, f"the container exited {self.process.returncode}:\n{self.log()}"
            assert time.monotonic() < deadline, f"the health check did not pass:\n{self.log()}"
            time.sleep(0.5)

    def terminate(self) -> int:
        """``docker stop``: SIGTERM to the image's command; the container's exit status."""
        assert self.process is not None
        self.server().send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=WAIT_SECONDS)
        self.process = None
        return status

    def remove(self) -> None:
        if self.process is not None and self.process.poll() is None:
            for child in psutil.Process(self.process.pid).children(recursive=True):
                child.kill()
            self.process.kill()
            self.process.wait(timeout=30)
        subprocess.run(["buildah", "rm", self.name], capture_output=True, timeout=120, check=False)


@pytest.fixture
def containers(image: Image, tmp_path: Path) -> Iterator[Callable[[dict[str, str]], Container]]:
    """Makes containers of the image; every one is stopped and removed afterwards."""
    made: list[Container] = []

    def make(env: dict[str, str]) -> Container:
        made.append(Container(image, env, tmp_path))
        return made[-1]

    yield make
    for container in made:
        container.remove()


def mount_of(pid: int, mount_point: str) -> tuple[int, str]:
    """The id and source of the mount at ``mount_point`` as process ``pid`` sees it."""
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == mount_point:
            return int(fields[0]), fields[3]
    raise AssertionError(f"nothing is mounted at {mount_point} in process {pid}")


def open_database_files(pid: int) -> dict[str, int]:
    """The SQLite files process ``pid`` holds open: name → id of the mount they are on."""
    found: dict[str, int] = {}
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
            info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
        except OSError:
            continue
        mount = re.search(r"^mnt_id:\s*(\d+)", info, flags=re.M)
        if re.search(r"lastword\.db(-wal|-shm)?$", target) and mount is not None:
            found[Path(target).name] = int(mount.group(1))
    return found


def test_image_serves_as_non_root_keeps_sqlite_on_data_and_stops_cleanly(
    containers: Callable[[dict[str, str]], Container], image: Image
) -> None:
    """Health check passes; the demo's max-tokens result is right; the service runs as the
    image's non-root user with its SQLite file on the /data volume; SIGTERM ends it with status
    0; a restart on the same /data serves the same result."""
    container = containers({})
    container.start()
    container.wait_healthy()

    # The `lastword` command is on the image's PATH: play the demo from inside the container.
    run_id = container.exec("lastword", "demo", "max-tokens-partial", "--url", container.url).strip()
    stop_reason, output, (input_tokens, output_tokens) = EXPECTED["max-tokens-partial"]
    with httpx.Client(base_url=container.url, timeout=30) as api:
        result = api.get(f"/v1/runs/{run_id}/result").json()
        tool = api.get(f"/v1/runs/{run_id}/tool-result").json()
    assert (result["status"], result["stopReason"], result["output"]) == ("ended", stop_reason, output)
    assert (result["usage"]["inputTokens"], result["usage"]["outputTokens"]) == (input_tokens, output_tokens)
    assert tool["isError"] is True and tool["content"][0]["text"].endswith(output[0]["text"])

    server = container.server()
    uid = int(container.exec("id", "-u"))
    assert uid != 0 and container.exec("id", "-un").strip() == "lastword"
    assert server.uids().real == server.uids().effective == uid
    data_mount, data_source = mount_of(server.pid, "/data")
    files = open_database_files(server.pid)
    assert "lastword.db" in files, files
    assert set(files.values()) == {data_mount}, (files, data_mount)
    assert json.loads(container.exec("python", "-c", "import os, json; s = os.stat('/data/lastword.db'); "
                                     "print(json.dumps([s.st_uid, s.st_size > 0]))")) == [uid, True]

    assert container.terminate() == 0, container.log()
    assert "Finished server process" in container.log()

    container.start()
    container.wait_healthy()
    assert mount_of(container.server().pid, "/data")[1] == data_source
    with httpx.Client(base_url=container.url, timeout=30) as api:
        assert api.get(f"/v1/runs/{run_id}/result").json() == result
    assert container.terminate() == 0, container.log()


def compose_replicas() -> dict[str, dict[str, Any]]:
    """docker-compose.yml's lastword services (the ones built from this Dockerfile)."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return {name: service for name, service in compose["services"].items() if service.get("build") == "."}


@pytest.mark.postgres
@pytest.mark.anyio
async def test_two_replicas_on_postgresql_hear_each_others_subagent_end(
    containers: Callable[[dict[str, str]], Container],
) -> None:
    """Two containers wired as docker-compose.yml wires its replicas (its environment, one
    PostgreSQL): a subscriber on B gets the subagent/end of a run fed and ended through A."""
    replicas = compose_replicas()
    assert len(replicas) == 2, replicas
    environments = [{key: str(value) for key, value in service["environment"].items()} for service in replicas.values()]
    for service, environment in zip(replicas.values(), environments):
        # The compose file points each replica at its postgres service, and waits for its health.
        assert urlsplit(environment["LASTWORD_DATABASE_URL"]).hostname == "postgres"
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert environment["LASTWORD_PORT"] == service["ports"][0].rsplit(":", 1)[1]
    with postgres_schema() as database_url:
        # Here the one PostgreSQL is the test server on 127.0.0.1, and host networking gives
        # each replica its own port instead of compose's port mapping.
        a, b = (containers({**environment, "LASTWORD_DATABASE_URL": database_url, "LASTWORD_LEASE_SECONDS": "0",
                            "LASTWORD_KEEPALIVE_SECONDS": "1"})
                for environment in environments)
        for container in (a, b):
            container.start()
        for container in (a, b):
            container.wait_healthy()

        async with httpx.AsyncClient(base_url=a.url, timeout=30) as client_a, \
                httpx.AsyncClient(base_url=b.url, timeout=30) as client_b:
            created = await client_a.post("/v1/runs", json={"agent": "compose"})
            assert created.status_code == 201, created.text
            run_id = created.json()["runId"]
            async with open_stream(client_b, f"/v1/runs/{run_id}/stream") as stream:
                assert (await stream.next()).event == "run/snapshot"
                posted = await client_a.post(f"/v1/runs/{run_id}/events", json=[
                    {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "from A"}]}}])
                assert posted.status_code == 200, posted.text
                ended = await client_a.post(f"/v1/runs/{run_id}/end", json={"stopReason": "completed"})
                assert ended.status_code == 200, ended.text
                live = await stream.until_closed()
            assert [event.event for event in live] == ["subagent/end"]
            assert payload(live[0])["lastAssistantMessage"] == [{"type": "text", "text": "from A"}]
            result = (await client_b.get(f"/v1/runs/{run_id}/result")).json()
            assert (result["stopReason"], result["output"]) == ("completed", [{"type": "text", "text": "from A"}])

        for container in (a, b):
            assert await asyncio.to_thread(container.terminate) == 0, container.log()
