"""docs/WALKTHROUGH.md's webhook block ("Webhooks and join") runs as written and lists a delivery."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.servers import threaded_server

README = Path(__file__).resolve().parent.parent / "docs" / "WALKTHROUGH.md"
BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)


@pytest.fixture
def private_hooks_url(make_settings: Any) -> Iterator[str]:
    """A service started as the section says: LASTWORD_WEBHOOK_ALLOW_PRIVATE=true."""
    with threaded_server(make_settings(webhook_allow_private=True)) as url:
        yield url


@pytest.mark.skipif(shutil.which("curl") is None, reason="the block uses curl")
def test_the_webhook_block_lists_the_delivery_of_the_end(private_hooks_url: str) -> None:
    """The block creates the child with a webhook, ends its turn, and its last command lists the
    delivery of that end (not an empty list)."""
    section = README.read_text().split("## Webhooks and join", 1)[1].split("\n## ", 1)[0]
    block = BLOCK.findall(section)[0]
    script = "set -euo pipefail\n" + block.replace("localhost:8000", private_hooks_url.removeprefix("http://"))
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    deliveries = json.loads(last[last.index('{"deliveries"'):])["deliveries"]
    assert [(d["webhookId"], d["turn"]) for d in deliveries] == [("msg_kid-1_1", 1)], done.stdout
