"""docs/WALKTHROUGH.md's "Webhooks and join" runs as written, in the order written: the service
started as its first block says, the receiver of its second, the child's block (twice in a row:
it makes its own ids) delivering to that receiver, and the join example answering at once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import free_port, threaded_server

PAGE = Path(__file__).resolve().parent.parent / "docs" / "WALKTHROUGH.md"
SH = re.compile(r"```sh\n(.*?)```", re.DOTALL)
PYTHON = re.compile(r"```python\n(.*?)```", re.DOTALL)


def section() -> str:
    return PAGE.read_text().split("## Webhooks and join", 1)[1].split("\n## ", 1)[0]


@pytest.fixture
def private_hooks_url(make_settings: Any) -> Iterator[str]:
    """A service started as the section's first block says: LASTWORD_WEBHOOK_ALLOW_PRIVATE=true."""
    assert SH.findall(section())[0].strip() == "LASTWORD_WEBHOOK_ALLOW_PRIVATE=true lastword serve"
    with threaded_server(make_settings(webhook_allow_private=True)) as url:
        yield url


@pytest.mark.skipif(shutil.which("curl") is None, reason="the block uses curl")
def test_the_webhook_blocks_deliver_to_the_receiver_in_the_order_written(private_hooks_url: str) -> None:
    """The receiver runs; the child's block, run twice, creates a child with a webhook and ends
    it; the receiver prints each child's id and stop reason (its signature verified), and the
    block's last answer lists that delivery."""
    port = free_port()
    receiver_script, _ = PYTHON.findall(section())
    receiver = subprocess.Popen([sys.executable, "-c", receiver_script.replace("9000", str(port))],
                                stdout=subprocess.PIPE, text=True)
    try:
        block = SH.findall(section())[1]
        script = "set -euo pipefail\n" + block.replace("localhost:8000", private_hooks_url.removeprefix("http://")) \
            .replace("localhost:9000", f"127.0.0.1:{port}")
        for attempt in (1, 2):
            done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, done.stderr
            created, ended, listed = (json.loads(line) for line in done.stdout.splitlines())
            kid = created["runId"]
            assert ended["stopReason"] == "completed", ended
            assert [(d["webhookId"], d["turn"]) for d in listed["deliveries"]] == [(f"msg_{kid}_1", 1)], attempt
            assert receiver.stdout is not None
            assert receiver.stdout.readline().split() == [kid, "completed"]  # waits for the delivery
    finally:
        receiver.kill()
        receiver.wait()
        if receiver.stdout is not None:
            receiver.stdout.close()


def test_the_join_example_answers_with_its_three_children(base_url: str) -> None:
    """The join example makes its own parent and three children, so join(expect=3) answers."""
    _, join_script = PYTHON.findall(section())
    script = join_script.replace("http://localhost:8000", base_url)
    for _ in (1, 2):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                              check=False, env=os.environ)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("True ["), done.stdout
        assert all(f"('completed', \"child {n}'s answer\")" in done.stdout for n in range(3)), done.stdout
