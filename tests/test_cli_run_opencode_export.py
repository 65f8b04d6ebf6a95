"""``lastword run`` recovers opencode's last text from ``opencode export`` (SPEC §19, opencode#50514).

``opencode run`` may exit 0 with its final text part never printed (the part races the session's
idle event), or with nothing printed at all; the text is in its database. The race could not be
provoked with the pinned opencode against the scripted model (it printed the text every time), so
the child here is the real opencode behind a thin wrapper named ``opencode`` that drops from its
stdout what the race drops; ``opencode export`` is the real one, on the real session.
"""

from __future__ import annotations

import stat
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api_helpers import ingested, result, shared_api, shared_base_url  # noqa: F401
from tests.cli_children.record import BIN, run_cli

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (BIN / "opencode").exists(), reason=f"opencode not installed ({BIN})")]

ANSWER = "Hello from the fake model. The answer is 42."
RACED = """\
#!{python}
import json, os, subprocess, sys

REAL, MODE = {real!r}, {mode!r}
if sys.argv[1:2] != ["run"]:
    os.execv(REAL, [REAL, *sys.argv[1:]])  # export, session list: the real thing
done = subprocess.run([REAL, *sys.argv[1:]], stdout=subprocess.PIPE)
lines = done.stdout.splitlines(keepends=True)
texts = [index for index, line in enumerate(lines) if json.loads(line)["type"] == "text"]
# what opencode#50514 loses: the last text part, or everything
kept = [] if MODE == "nothing" else [line for index, line in enumerate(lines) if index != texts[-1]]
sys.stdout.buffer.write(b"".join(kept))
sys.exit(1 if MODE == "failed" else done.returncode)
"""


def raced(tmp_path: Path, mode: str) -> Path:
    """An ``opencode`` that runs the real one and drops from its stdout what ``mode`` says."""
    wrapper = tmp_path / "opencode"
    wrapper.write_text(RACED.format(python=sys.executable, real=str(BIN / "opencode"), mode=mode))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper


def through_lastword(url: str, run_id: str, wrapper: Path) -> Any:
    def wrap(argv: list[str]) -> list[str]:
        return [sys.executable, "-m", "lastword.cli", "run", "--url", url, "--run-id", run_id, "--",
                str(wrapper), *argv[1:]]
    return wrap


@pytest.mark.parametrize("lost", ["last text", "nothing"])
def test_the_last_text_opencode_never_printed_comes_from_its_export(
        shared_api: httpx.Client, shared_base_url: str, tmp_path: Path, lost: str) -> None:  # noqa: F811
    wrapper = raced(tmp_path, "nothing" if lost == "nothing" else "text")
    run_id = f"opencode-export-{lost.replace(' ', '-')}-{uuid.uuid4().hex}"
    details: dict[str, Any] = {}
    out, status = run_cli("opencode", "completion", details=details,
                          wrap=through_lastword(shared_base_url, run_id, wrapper))
    assert (status, out.decode()) == (0, ANSWER + "\n"), details["stderr"]
    assert b"opencode export" in details["stderr"], details["stderr"]
    answer = result(shared_api, run_id)
    assert answer["stopReason"] == "completed"
    assert answer["output"] == [{"type": "text", "text": ANSWER}]
    assert answer["usage"]["outputTokens"] > 0  # the step's usage came with it
    messages = [event["message"] for event in ingested(shared_api, run_id) if event["type"] == "assistant/message"]
    # once each, though the export holds the parts stdout printed too: the text, and the step's usage
    assert [message["content"] for message in messages if message["content"]] == [[{"type": "text", "text": ANSWER}]]
    assert len([message for message in messages if message.get("usage")]) == 1


def test_a_failed_opencode_is_not_taken_for_the_race(shared_api: httpx.Client, shared_base_url: str,  # noqa: F811
                                                     tmp_path: Path) -> None:
    """A run that exited non-zero is not opencode#50514: its export is not read (it might say a
    step ended that the failed run never finished)."""
    run_id = f"opencode-failed-{uuid.uuid4().hex}"
    details: dict[str, Any] = {}
    run_cli("opencode", "completion", details=details,
            wrap=through_lastword(shared_base_url, run_id, raced(tmp_path, "failed")))
    assert b"opencode export" not in details["stderr"], details["stderr"]
    assert result(shared_api, run_id)["output"] == []
