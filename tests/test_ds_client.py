"""A real Durable Streams client (PyPI ``durable-streams``, ElectricSQL's Python client) on a
child's run (SPEC §17), through a real server on each backend.

The child writes its run with the client's ``DurableStream`` (create, append: each message a §4
event); the parent tails the same run with the client's ``stream()``, live (SSE and long-poll),
and sees each event as it is appended, up to the run's ``subagent/end``. Each step waits for a
signal (the parent has read what came before), so what the parent sees after it was read live.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from durable_streams import DurableStream, stream

from tests.builders import message, turn_end
from tests.servers import threaded_server

#: Seconds to wait for the parent to see one event before the test gives up.
SEEN_WITHIN = 30


@pytest.fixture
def patient_url(make_settings: Any) -> Iterator[str]:
    """A server whose long polls and SSE keep-alives outlast ``SEEN_WITHIN``: a reader that is
    not woken by an append is not rescued by its poll's end or a keep-alive tick."""
    with threaded_server(make_settings(ds_long_poll_seconds=4 * SEEN_WITHIN, keepalive_seconds=4 * SEEN_WITHIN)) as url:
        yield url


@pytest.mark.parametrize("live", ["sse", "long-poll"])
def test_a_durable_streams_client_tails_a_childs_run_live(patient_url: str, live: str) -> None:
    url = f"{patient_url}/ds/runs/child-{live}"
    seen: queue.Queue[dict[str, Any] | BaseException] = queue.Queue()

    def parent() -> None:
        try:
            with stream(url, offset="-1", live=live, timeout=SEEN_WITHIN) as response:  # type: ignore[arg-type]
                for event in response.iter_json():
                    seen.put(event)
                    if event["type"] == "subagent/end":
                        return
        except BaseException as error:  # handed to the test, which fails with it
            seen.put(error)

    def next_seen() -> dict[str, Any]:
        event = seen.get(timeout=SEEN_WITHIN)
        assert not isinstance(event, BaseException), repr(event)
        return event

    with DurableStream.create(url, content_type="application/json") as child:
        reader = threading.Thread(target=parent, daemon=True)
        reader.start()
        assert next_seen()["type"] == "subagent/start"
        child.append(message("working on it"))
        assert next_seen()["message"]["content"] == [{"type": "text", "text": "working on it"}]
        child.append(message("the answer"))
        assert next_seen()["message"]["content"] == [{"type": "text", "text": "the answer"}]
        child.append(turn_end("completed"))
        assert next_seen()["type"] == "turn/end"
        end = next_seen()
        reader.join(SEEN_WITHIN)
    assert end["type"] == "subagent/end" and end["stopReason"] == "completed"
    assert end["lastAssistantMessage"] == [{"type": "text", "text": "the answer"}]
    assert not reader.is_alive()


README = Path(__file__).resolve().parent.parent / "docs" / "DURABLE_STREAMS.md"
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def test_the_readmes_client_block_prints_the_childs_events_as_they_come(base_url: str) -> None:
    """docs/DURABLE_STREAMS.md's Python client block runs as written, twice in a row, and prints
    the child's events in order, ending with its ``subagent/end``."""
    section = README.read_text().split("## Durable Streams: any client can tail a run", 1)[1].split("\n## ", 1)[0]
    block = PYTHON_BLOCK.findall(section)[0].replace("http://127.0.0.1:8000", base_url)
    for _ in (1, 2):  # twice in a row: the block makes its own run id
        done = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["subagent/start", "assistant/message", "turn/end", "subagent/end"]


def test_the_curl_block_reads_a_run_it_makes_twice_in_a_row(base_url: str) -> None:
    """docs/DURABLE_STREAMS.md's curl block (its own demo run, then the log and the live read,
    which ends with the run) runs as written twice in a row."""
    section = README.read_text().split("## Durable Streams: any client can tail a run", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    script = "set -euo pipefail\n" + block.replace("http://127.0.0.1:8000", base_url)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "LASTWORD_URL": base_url}
    for _ in (1, 2):
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        log = json.loads(done.stdout.splitlines()[0])
        assert log[0]["type"] == "subagent/start" and log[-1]["type"] == "subagent/end", log
        assert "event: data" in done.stdout or "data:" in done.stdout, done.stdout
