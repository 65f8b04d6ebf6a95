#!/usr/bin/env python3
"""Every recorded case, what its CLI answered and what lastword answers: a markdown table.

    .venv/bin/python tests/cli_children/table.py

Each recorded stdout in ``fixtures/`` goes through a lastword server started here (in this
process, on a SQLite file in a temp dir) as ``lastword run`` sends it: one run per case, the
whole stdout to ``POST /v1/runs/{id}/ingest/<format>``; a resumed session's second invocation
(``<scenario>.turn2``) to a second turn of the same run (``POST /v1/runs/{id}/turns``). A
turn the output leaves open is ended as ``lastword run`` ends it when the child exits
(``error``, ``no_terminal_event``). The table gives, per case, the CLI's own answer (Claude
Code's ``result`` line; Codex's last ``agent_message``, or its error; opencode's last ``text``),
then lastword's: the selected output's text, the stop reason, usage in/out (and the error's
type where the turn ended in one).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lastword.settings import Settings  # noqa: E402

from tests.servers import threaded_server  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures"
#: Fixture folder -> the ``{format}`` of the ingest.
FORMATS = {"claude-code": "claude-code", "claude-code-partial": "claude-code", "codex": "codex",
           "opencode": "opencode", "opencode-anthropic": "opencode"}
CELL = 60


def cli_answer(directory: str, lines: list[dict[str, Any]]) -> str:
    """What the CLI itself printed as its answer (its last one, where it printed several)."""
    answer: Any = None
    for line in lines:
        kind = line.get("type")
        if directory.startswith("claude-code") and kind == "result":
            answer = line.get("result")
        elif directory == "codex":
            item = line.get("item") or {}
            if kind == "item.completed" and item.get("type") == "agent_message":
                answer = item.get("text")
            elif kind == "turn.failed":
                answer = f"(turn.failed) {(line.get('error') or {}).get('message')}"
        elif directory.startswith("opencode"):
            if kind == "text":
                answer = (line.get("part") or {}).get("text")
            elif kind == "error":
                answer = f"(error) {((line.get('error') or {}).get('data') or {}).get('message')}"
    return "null" if answer is None else json.dumps(answer)


def cell(text: str) -> str:
    text = text.replace("\n", " ").replace("|", "\\|")
    return text if len(text) <= CELL else text[: CELL - 1] + "…"


def ingest(client: httpx.Client, run_id: str, format: str, body: bytes) -> dict[str, Any]:
    """The body into the run's open turn; the turn's result once it ended (ended as ``lastword
    run`` would when the output left it open)."""
    answer = client.post(f"/v1/runs/{run_id}/ingest/{format}", content=body,
                         headers={"Content-Type": "application/x-ndjson"})
    answer.raise_for_status()
    if answer.json().get("stopReason") is None:
        client.post(f"/v1/runs/{run_id}/end", json={"stopReason": "error", "error": {
            "type": "no_terminal_event", "message": "exited without a line that ends its turn"}}).raise_for_status()
    result: dict[str, Any] = client.get(f"/v1/runs/{run_id}/result").json()
    return result


def cases() -> list[tuple[str, str, Path]]:
    """(folder, scenario, stdout) of every recorded case, a session's second turn after its first."""
    found = []
    for directory in FORMATS:
        for path in sorted((FIXTURES / directory).glob("*.ndjson")):
            found.append((directory, path.name.removesuffix(".ndjson"), path))
    return found


def row(client: httpx.Client, directory: str, scenario: str, path: Path) -> str:
    body = path.read_bytes()
    lines = [json.loads(line) for line in body.splitlines() if line.strip()]
    base = scenario.removesuffix(".turn2")
    run_id = f"{directory}-{base}"
    if scenario.endswith(".turn2"):
        client.post(f"/v1/runs/{run_id}/turns").raise_for_status()
    else:
        client.post("/v1/runs", json={"runId": run_id, "agent": directory, "mode": "continuable"}).raise_for_status()
    result = ingest(client, run_id, FORMATS[directory], body)
    output = "".join(block.get("text", "") for block in result["output"] if block.get("type") == "text")
    usage = result["usage"]
    error = result.get("error")
    stop = result["stopReason"] + (f" ({error['type']})" if isinstance(error, dict) and error.get("type") else "")
    return (f"| {directory} | {scenario} | {cell(cli_answer(directory, lines))} | {cell(json.dumps(output))} | "
            f"{stop} | {usage['inputTokens']}/{usage['outputTokens']} |")


def main() -> int:
    with tempfile.TemporaryDirectory() as temp:
        settings = Settings(database_url=f"sqlite:///{temp}/table.db", lease_seconds=0, log_level="warning")
        with threaded_server(settings) as url, httpx.Client(base_url=url, timeout=60) as client:
            print("| CLI | case | the CLI's answer | lastword's output | stop | usage in/out |")
            print("| --- | --- | --- | --- | --- | --- |")
            for directory, scenario, path in cases():
                print(row(client, directory, scenario, path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
