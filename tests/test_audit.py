"""``lastword audit`` against a real server, on runs made by every ``lastword demo`` scenario."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from lastword.cli.audit import FormatTally, RunAudit, audit_runs, report_lines, tally
from lastword.client.core import LastwordAPIError, LastwordClient
from lastword.cli.demo import SCENARIOS, run_scenario

from tests.servers import free_port


def lastword(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lastword.cli", *args], capture_output=True, text=True,
                          timeout=60, check=False)


#: What each demo's transcripts had to leave out and add: {format: (omitted, inserted)}.
EXPECTED: dict[str, dict[str, tuple[dict[str, int], dict[str, int]]]] = {
    "max-tokens-partial": {"anthropic": ({"empty": 1}, {"leading_assistant": 1}), "openai": ({"empty": 1}, {})},
    "cancelled-streaming": {"anthropic": ({}, {"leading_assistant": 1}), "openai": ({}, {})},
    "reasoning-only": {"anthropic": ({}, {"leading_assistant": 1}),
                       "openai": ({"reasoning": 1, "nothing_kept": 1}, {})},
    "completed": {"anthropic": ({}, {"leading_assistant": 1}), "openai": ({}, {})},
}


def test_audit_reports_every_demo_scenario(api: httpx.Client, base_url: str) -> None:
    """Each demo run is reported with exactly what its transcripts omitted and inserted."""
    made = {run_scenario(name, base_url): name for name in sorted(SCENARIOS)}
    broken = api.post("/v1/runs", json={"agent": "broken"}).json()["runId"]
    api.post(f"/v1/runs/{broken}/events", json=[
        {"type": "user/message", "message": {"content": "go"}},
        {"type": "assistant/message", "message": {"content": [
            {"type": "text", "text": "  "}, {"type": "tool_call", "id": "c1", "name": "ls", "input": {}}]}},
        {"type": "tool/result", "toolCallId": "zz", "content": "stray"},
    ]).raise_for_status()
    api.post(f"/v1/runs/{broken}/end", json={"stopReason": "cancelled"}).raise_for_status()

    shown = lastword("audit", "--url", base_url, "--json")
    assert shown.returncode == 0, shown.stderr
    report = {item["runId"]: item for item in json.loads(shown.stdout)}
    assert set(report) == set(made) | {broken}
    for run_id, name in made.items():
        assert report[run_id]["agent"] == f"demo:{name}"
        assert set(report[run_id]["formats"]) == {"anthropic", "openai"}
        # A scenario added later is audited too; its exact counts are pinned once listed here.
        for fmt, (omitted, inserted) in EXPECTED.get(name, {}).items():
            assert report[run_id]["formats"][fmt] == {"omitted": omitted, "inserted": inserted}, (name, fmt)
    for fmt in ("anthropic", "openai"):
        assert report[broken]["formats"][fmt] == {
            "omitted": {"blank_text": 1, "unknown_tool_call": 1}, "inserted": {"interrupted_tool_call": 1}}

    text = lastword("audit", "--url", base_url)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert f"{broken}  agent=broken  ended:" in lines
    assert "  anthropic: omitted blank_text=1, unknown_tool_call=1; inserted interrupted_tool_call=1" in lines
    repaired = sum(1 for item in report.values() if any(any(f.values()) for f in item["formats"].values()))
    assert lines[-3] == f"audited {len(report)} run(s) created in the last 24 h: {repaired} needed omissions or repairs"


def test_since_leaves_older_runs_out(api: httpx.Client, base_url: str) -> None:
    """--since 0 audits no run: every run was created before the audit started."""
    run_scenario("completed", base_url)
    shown = lastword("audit", "--url", base_url, "--since", "0")
    assert shown.returncode == 0
    assert shown.stdout.splitlines() == ["audited 0 run(s) created in the last 0 h: 0 needed omissions or repairs"]


def test_audit_pages_through_many_runs(api: httpx.Client, base_url: str) -> None:
    """More runs than one page of the list are all audited."""
    for _ in range(205):
        api.post("/v1/runs", json={}).raise_for_status()
    shown = lastword("audit", "--url", base_url, "--json")
    assert len(json.loads(shown.stdout)) == 205


def test_unreachable_service_is_one_line_and_its_exit_status() -> None:
    """A service that is not there gives one clear line, not a traceback, and exit status 8."""
    shown = lastword("audit", "--url", f"http://127.0.0.1:{free_port()}")
    assert shown.returncode == 8
    assert shown.stderr.startswith("lastword audit: cannot reach") and len(shown.stderr.splitlines()) == 1


def test_report_lines_for_clean_and_repaired_runs() -> None:
    """The human report: clean runs in one line, others per format, then totals."""
    repaired = RunAudit("r2", None, "running", {
        "anthropic": FormatTally(Counter({"empty": 2}), Counter()),
        "openai": FormatTally(Counter(), Counter()),
    })
    clean = RunAudit("r1", "a", "ended", {"anthropic": FormatTally(), "openai": FormatTally()})
    assert list(report_lines([clean, repaired], 1.5)) == [
        "r1  agent=a  ended: clean",
        "r2  agent=-  running:",
        "  anthropic: omitted empty=2",
        "  openai:    nothing",
        "audited 2 run(s) created in the last 1.5 h: 1 needed omissions or repairs",
        "  anthropic: omitted empty=2; inserted nothing",
    ]


def test_tally_counts_by_reason() -> None:
    """tally counts omitted and inserted entries by their reason."""
    answer: dict[str, Any] = {"omitted": [{"reason": "empty"}, {"reason": "empty"}, {"reason": "blank_text"}],
                              "inserted": [{"index": 0, "reason": "leading_assistant"}]}
    counted = tally(answer)
    assert counted.omitted == Counter({"empty": 2, "blank_text": 1})
    assert counted.inserted == Counter({"leading_assistant": 1})
    assert not tally({"omitted": []})


def test_audit_runs_reads_through_the_client(base_url: str) -> None:
    """audit_runs takes the client: typed pages, and a refusal is a LastwordAPIError."""
    run_id = run_scenario("completed", base_url)
    with LastwordClient(base_url) as client:
        [audit] = audit_runs(client, since_hours=1, now=time.time())
    assert (audit.run_id, audit.agent, audit.status) == (run_id, "demo:completed", "ended")
    assert audit.formats["anthropic"].inserted == Counter({"leading_assistant": 1})
    with LastwordClient(base_url, transport=httpx.MockTransport(
            lambda request: httpx.Response(401, json={"code": "unauthorized", "detail": "no token"}))) as refused:
        with pytest.raises(LastwordAPIError) as raised:
            audit_runs(refused, since_hours=1, now=time.time())
    assert raised.value.code == "unauthorized"
