"""The container's files, checked without building: the lock file agrees with pyproject.toml,
hadolint passes on the Dockerfile, and docker-compose.yml is valid under the Compose spec.

The image itself is built and run in tests/test_container.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
#: The command that made requirements.lock; its header records it and this test checks that.
LOCK_COMMAND = (
    "uv pip compile pyproject.toml --group build --universal --python-version 3.11 "
    "--generate-hashes -o requirements.lock"
)
SCRIPTS = Path(sysconfig.get_path("scripts"))


@dataclass
class Pin:
    name: str
    version: str
    hashes: list[str]
    via: list[str] = field(default_factory=list)


def parse_lock(text: str) -> dict[str, Pin]:
    """``name==version [; marker] --hash=…`` entries of a pip requirements file, with uv's
    ``# via`` annotations (one or several lines under the entry)."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    in_via = False
    for line in text.replace("\\\n", " ").splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not line.startswith((" ", "#")):
            requirement, *hashes = re.split(r"\s+--hash=", stripped)
            parsed = Requirement(requirement)
            (spec,) = parsed.specifier
            assert spec.operator == "==", line
            current = Pin(canonicalize_name(parsed.name), spec.version, [h.strip() for h in hashes])
            pins[current.name] = current
            in_via = False
        elif current is not None and stripped.startswith("# via"):
            rest = stripped.removeprefix("# via").strip()
            in_via = not rest
            if rest:
                current.via.append(rest)
        elif current is not None and in_via and stripped.startswith("#   "):
            current.via.append(stripped.removeprefix("#").strip())
    return pins


def regenerate_hint() -> str:
    return f"requirements.lock disagrees with pyproject.toml; regenerate it with:\n  {LOCK_COMMAND}"


def lock_disagreements(pyproject: dict[str, object], pins: dict[str, Pin]) -> list[str]:
    """Every way the lock file and pyproject.toml disagree (empty when they agree)."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    build_system = pyproject["build-system"]
    assert isinstance(build_system, dict)
    groups = pyproject.get("dependency-groups", {})
    assert isinstance(groups, dict)
    problems: list[str] = []

    wanted = {"pyproject.toml": [Requirement(r) for r in project["dependencies"]],
              "pyproject.toml:build": [Requirement(r) for r in build_system["requires"]]}
    if sorted(groups.get("build", [])) != sorted(build_system["requires"]):
        problems.append("[dependency-groups] build is not [build-system] requires")
    for source, requirements in wanted.items():
        for requirement in requirements:
            name = canonicalize_name(requirement.name)
            pin = pins.get(name)
            if pin is None:
                problems.append(f"{requirement} ({source}) is not pinned")
            elif not requirement.specifier.contains(pin.version, prereleases=True):
                problems.append(f"{requirement} ({source}) but the lock pins {name}=={pin.version}")
        # Pinned because pyproject.toml asked, yet pyproject.toml no longer asks: a stale lock.
        asked = {canonicalize_name(r.name) for r in requirements}
        for pin in pins.values():
            if f"lastword ({source})" in pin.via and pin.name not in asked:
                problems.append(f"{pin.name} is locked for {source}, which no longer asks for it")
    for pin in pins.values():
        if not pin.hashes:
            problems.append(f"{pin.name}=={pin.version} has no hash")
        if not pin.via:
            problems.append(f"{pin.name}=={pin.version} says nothing of why it is pinned")
    return problems


def test_lock_file_agrees_with_pyproject() -> None:
    """Every dependency of pyproject.toml (and what building it needs) is pinned, with hashes,
    at a version its specifier admits, and nothing is locked that pyproject.toml dropped."""
    text = LOCK.read_text()
    assert LOCK_COMMAND in text.splitlines()[1], regenerate_hint()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    problems = lock_disagreements(pyproject, parse_lock(text))
    assert not problems, regenerate_hint() + "\n" + "\n".join(problems)


def test_lock_check_sees_each_kind_of_drift() -> None:
    """The check above fails on an added dependency, a raised bound, a dropped one, a pin
    without hashes, and a build requirement out of step with the build group."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = parse_lock(LOCK.read_text())
    assert lock_disagreements(pyproject, pins) == []

    def drifted(change: str) -> list[str]:
        copy = tomllib.loads((ROOT / "pyproject.toml").read_text())
        changed_pins = parse_lock(LOCK.read_text())
        deps = copy["project"]["dependencies"]
        if change == "added":
            deps.append("rich>=13")
        elif change == "raised":
            deps[:] = [("fastapi>=999" if d.startswith("fastapi") else d) for d in deps]
        elif change == "dropped":
            deps[:] = [d for d in deps if not d.startswith("orjson")]
        elif change == "unhashed":
            changed_pins["orjson"].hashes.clear()
        elif change == "build":
            copy["build-system"]["requires"] = ["setuptools>=999"]
        return lock_disagreements(copy, changed_pins)

    assert drifted("added") == ["rich>=13 (pyproject.toml) is not pinned"]
    assert drifted("raised")[0].startswith("fastapi>=999 (pyproject.toml) but the lock pins fastapi==")
    assert drifted("dropped") == ["orjson is locked for pyproject.toml, which no longer asks for it"]
    assert drifted("unhashed") == [f"orjson=={pins['orjson'].version} has no hash"]
    assert "[dependency-groups] build is not [build-system] requires" in drifted("build")


def run_hadolint(dockerfile: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPTS / "hadolint"), "--no-color", str(dockerfile)],
                          capture_output=True, text=True, timeout=120)


def test_hadolint_passes_on_the_dockerfile() -> None:
    result = run_hadolint(ROOT / "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_fails_a_bad_dockerfile(tmp_path: Path) -> None:
    """The lint can fail: an untagged base and a shell-form CMD are reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN cd /tmp && pip install flask\nCMD lastword serve\n")
    result = run_hadolint(bad)
    assert result.returncode != 0
    assert "DL3006" in result.stdout and "DL3025" in result.stdout


def check_compose(path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema with the Compose specification's schema that it ships."""
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True, text=True, timeout=120,
    )


def test_compose_file_is_valid_under_the_compose_spec() -> None:
    result = check_compose(ROOT / "docker-compose.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("mistake", [("    ports:\n", "    portz:\n"), ("condition: service_healthy", "condition: healthy")])
def test_compose_check_fails_a_broken_compose_file(tmp_path: Path, mistake: tuple[str, str]) -> None:
    """The schema check can fail: a misspelt key, a value outside the spec's enum."""
    text = (ROOT / "docker-compose.yml").read_text()
    assert mistake[0] in text
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(text.replace(mistake[0], mistake[1], 1))
    result = check_compose(broken)
    assert result.returncode == 1, result.stdout + result.stderr


def test_health_checks_ask_readyz_and_stops_outlast_the_drain() -> None:
    """The image's HEALTHCHECK and each compose replica's health check ask /readyz (the store
    answers, the replica is not draining), and compose gives a stop longer than the drain."""
    import yaml
    from lastword.settings import Settings

    healthcheck = re.search(r"^HEALTHCHECK .*?CMD (.*)$", (ROOT / "Dockerfile").read_text(), re.MULTILINE | re.DOTALL)
    assert healthcheck is not None and "/readyz" in healthcheck.group(1).splitlines()[0]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    replicas = {name: service for name, service in compose["services"].items() if name.startswith("lastword")}
    assert replicas
    drain = Settings.model_fields["drain_seconds"].default
    for name, service in replicas.items():
        assert "/readyz" in " ".join(service["healthcheck"]["test"]), name
        assert float(service["stop_grace_period"].removesuffix("s")) > drain, name


def test_compose_replicas_answer_their_service_names() -> None:
    """Another Compose service reaches a replica by its service name (``http://lastword-a:8000``):
    each name is in LASTWORD_ALLOWED_HOSTS, else /mcp refuses that Host (403 host_not_allowed)."""
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    replicas = [name for name in compose["services"] if name.startswith("lastword")]
    for name in replicas:
        allowed = compose["services"][name]["environment"].get("LASTWORD_ALLOWED_HOSTS", "")
        assert name in [host.strip() for host in allowed.split(",")], (name, allowed)


def test_compose_publishes_on_loopback_unless_told() -> None:
    """Replicas without tokens are published on 127.0.0.1 unless LASTWORD_PUBLISH says otherwise."""
    import yaml

    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    replicas = {name: service for name, service in compose["services"].items() if name.startswith("lastword")}
    for name, service in replicas.items():
        for port in service["ports"]:
            assert str(port).startswith("${LASTWORD_PUBLISH:-127.0.0.1}:"), (name, port)


def test_the_readmes_docker_run_publishes_on_loopback_and_outlasts_the_drain() -> None:
    from lastword.settings import Settings

    [line] = [line for line in (ROOT / "README.md").read_text().splitlines() if "docker run" in line and "-p" in line]
    assert re.search(r" -p 127\.0\.0\.1:\d+:8000 ", line), line
    stop = re.search(r"--stop-timeout (\d+)", line)
    assert stop is not None and float(stop.group(1)) > Settings.model_fields["drain_seconds"].default, line
