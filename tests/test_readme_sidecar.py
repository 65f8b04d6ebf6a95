"""The README's "Run it as a sidecar" section runs as written: its render-and-validate lines pass,
and what it says of the manifests and the compose file is what they hold."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def section() -> str:
    return (ROOT / "docs" / "RUNNING.md").read_text().split("## Run it as a sidecar", 1)[1].split("\n## ", 1)[0]


def shell_lines() -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", section(), re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_the_render_and_validate_lines_pass() -> None:
    """Each line renders a kustomization and validates it strictly against Kubernetes 1.33;
    a line that validated nothing would not count."""
    lines = shell_lines()
    assert [line.split()[2] for line in lines] == ["deploy/kubernetes/base", "deploy/kubernetes/postgres"]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for line in lines:
        done = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        assert "passed for resource deployment/agent against version 1.33" in done.stdout + done.stderr, line


def test_the_compose_snippet_names_a_service_and_condition_the_compose_file_has() -> None:
    """The parent's ``depends_on`` in the README waits for a replica the compose file defines,
    whose health check is /readyz."""
    (snippet,) = re.findall(r"```yaml\n(.*?)```", section(), re.DOTALL)
    agent = yaml.safe_load(snippet)["agent"]
    (service, wanted), = agent["depends_on"].items()
    assert wanted == {"condition": "service_healthy"}
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert "/readyz" in " ".join(compose["services"][service]["healthcheck"]["test"])
    assert agent["environment"]["LASTWORD_URL"] == f"http://{service}:8000"
