"""``python -m bench.adapter_answers OUT.json``: every answer of the adapters' endpoints over the
recorded bodies, to compare two revisions byte for byte (``--compare A.json B.json``).

A speed change to the provider or CLI ingest must not change a byte of what they answer or
store. This posts, in process (the app's lifespan, httpx's ASGI transport, a clock standing
still), every recorded CLI body of ``tests/cli_children/fixtures`` (each its own run; a resumed
session's second turn in a second turn; a transcript with its stdout and its subagent's), the
SDK-built provider streams of ``tests/provider_streams.py`` in each framing, the benchmark's
bodies (h, k), and provider bodies written otherwise than orjson writes them (spaces, ``\\u``
escapes, ``\\/``, floats, big integers, a repeated key), each also posted a second time
(duplicates), some in pieces of 7 bytes. It records each answer's status and bytes, each run's
``GET …/events`` pages, and every stored event's JSON as the store holds it.

Run it on each revision's code (``PYTHONPATH=<tree>/app``) and compare: the two files must be equal.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from bench.adapter import sse_body
from bench.cli_stream import _lines as cli_lines

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "cli_children" / "fixtures"
#: A recorded body's directory and the format it is posted as.
CLI_DIRECTORIES = {"claude-code": "claude-code", "claude-code-partial": "claude-code", "codex": "codex",
                   "opencode": "opencode", "opencode-anthropic": "opencode"}
START = 1_750_000_000.0


class Post:
    def __init__(self, run: str, path: str, body: bytes, content_type: str, piece: int = 0,
                 headers: dict[str, str] | None = None) -> None:
        self.run, self.path, self.body, self.content_type = run, path, body, content_type
        self.piece, self.headers = piece, headers or {}


def _provider_posts() -> Iterator[Post]:
    from tests import provider_streams as ps

    anthropic = {
        "text": ps.anthropic_stream("msg_plain", [ps.a_text("The answer ", "is ", "42.")], cache_read=3, cache_write=2),
        "tool": ps.anthropic_stream("msg_tool", [ps.a_text("Let me look."),
                                                 ps.a_tool("toolu_1", "search", '{"query": ', '"parse_config"}')],
                                    stop_reason="tool_use"),
        "cut_tool": ps.anthropic_stream("msg_cut_tool", [ps.a_tool("toolu_2", "read", '{"path": "b', '.py", "li')],
                                        stop_reason="max_tokens", output_tokens=4096),
        "thinking": ps.anthropic_stream("msg_think", [ps.a_thinking("Consider ", "the callers.", signature="EqQB"),
                                                      ps.a_text("Two callers.")]),
        "refusal": ps.anthropic_stream("msg_refuse", [ps.a_text("I can't help with that.")], stop_reason="refusal",
                                       stop_details={"type": "refusal", "category": "cyber", "explanation": "no"}),
        "error": ps.anthropic_stream("msg_err", [ps.a_text("Partial ", "answer")], error="Overloaded"),
        "cut": ps.anthropic_stream("msg_cut", [ps.a_text("Half ", "an ", "answer", " never finished")])[:6],
        "unicode": ps.anthropic_stream("msg_uni", [ps.a_text("héllo ", "wörld \u2028 ", "😀 \"q\" \\ </tag>")]),
    }
    builder = ps.OpenAIStream("resp_plain").created().message("Forty", "-two.")
    openai = {"text": builder.completed(builder.usage(100, 9, cached=60, cache_write=5))}
    builder = ps.OpenAIStream("resp_fc").created().message("Checking.").function_call("call_9", "lookup", '{"k":', ' 1}')
    openai["call"] = builder.completed(builder.usage(20, 5))
    builder = ps.OpenAIStream("resp_rs").created().reasoning("Two ", "callers.").message("Done.")
    openai["reasoning"] = builder.completed(builder.usage(10, 10))
    builder = ps.OpenAIStream("resp_ref").created().message(refusal="I can't help with that.")
    openai["refusal"] = builder.incomplete("content_filter", builder.usage(10, 3))
    openai["failed"] = ps.OpenAIStream("resp_failed").created().message("Partial.").failed("server_error", "crashed")
    openai["cut"] = ps.OpenAIStream("resp_cut").created().message("Half ", "done", done=False).events
    acp = {"chunks": [ps.acp_thought("Reading the file."), ps.acp_message("The loader "),
                      ps.acp_tool_call("t1", "Read loader.py"), ps.acp_tool_call_done("t1"),
                      ps.acp_message("has two callers."),
                      ps.acp_prompt_response(1, "cancelled", {"inputTokens": 30, "outputTokens": 8, "totalTokens": 38})],
           "thought": [ps.acp_thought("Nothing to say."), ps.acp_prompt_response(7, "end_turn")]}
    for format, streams in (("anthropic", anthropic), ("openai-responses", openai), ("acp", acp)):
        for name, stream in streams.items():
            for framing in ("sse", "ndjson", "json"):
                run = f"p-{format}-{name}-{framing}"
                body = ps.BODIES[framing](stream)
                for end in ("", "?end=true"):
                    yield Post(run + ("-end" if end else ""), f"/ingest/{format}{end}", body,
                               ps.CONTENT_TYPES[framing])
                yield Post(run, f"/ingest/{format}", body, ps.CONTENT_TYPES[framing], piece=7)  # again: duplicates
            yield Post(f"p-{format}-{name}-keyed", f"/ingest/{format}", ps.sse(stream), "text/event-stream",
                       headers={"Idempotency-Key": f"key-{name}"})
    # Written otherwise than orjson writes it: what a stored source holds is orjson's writing.
    odd_events = [
        '{"type": "message_start", "message": {"id": "msg_odd", "type": "message", "role": "assistant", '
        '"model": "m", "content": [], "stop_reason": null, "usage": {"input_tokens": 1, "output_tokens": 1}}}',
        '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""},"extra":1.50}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"caf\\u00e9 \\/ \\ud83d\\ude00"}}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"index":0}',
        '{ "type" : "content_block_delta" , "index" : 0 , "delta" : { "type" : "text_delta" , "text" : "spaced" } }',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"n","n":12345678901234567890}}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"f","f":-0.0,"e":1E+2}}',
        '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"dup","text":"dup2"}}',
        '{"type":"content_block_stop","index":0}',
        '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}',
        '{"type":"message_stop"}',
    ]
    for name, lines in (("odd", odd_events), ("odd-no-int", [line for line in odd_events if "1234567" not in line])):
        yield Post(f"p-{name}-sse", "/ingest/anthropic",
                   "".join(f"event: x\ndata: {line}\n\n" for line in lines).encode(), "text/event-stream")
        yield Post(f"p-{name}-ndjson", "/ingest/anthropic", "\n".join(lines).encode() + b"\n", "application/x-ndjson")
        yield Post(f"p-{name}-json", "/ingest/anthropic", ("[" + ",".join(lines) + "]").encode(), "application/json")
    yield Post("p-bench-h", "/ingest/anthropic", sse_body("msg_bench"), "text/event-stream")
    yield Post("p-bench-h", "/ingest/anthropic", sse_body("msg_bench"), "text/event-stream", piece=4096)


def _cli_posts() -> Iterator[Post]:
    for directory, format in CLI_DIRECTORIES.items():
        for path in sorted((FIXTURES / directory).glob("*.ndjson")):
            if path.name.endswith(".turn2.ndjson"):
                continue
            run = f"c-{directory}-{path.stem}"
            yield Post(run, f"/ingest/{format}", path.read_bytes(), "application/x-ndjson")
            yield Post(run, f"/ingest/{format}", path.read_bytes(), "application/x-ndjson", piece=7)  # duplicates
            second = path.with_name(f"{path.stem}.turn2.ndjson")
            if second.exists():  # (its run is continuable)
                yield Post(run, "/turns", b"", "application/json")
                yield Post(run, f"/ingest/{format}", second.read_bytes(), "application/x-ndjson")
    for scenario in sorted(path.name for path in (FIXTURES / "claude-code-transcript").iterdir()):
        where = FIXTURES / "claude-code-transcript" / scenario
        run = f"c-transcript-{scenario}"
        for agent in sorted((where / "subagents").glob("agent-*.jsonl")):
            meta = json.loads(agent.with_suffix(".meta.json").read_text())
            yield Post(run, f"/ingest/claude-code-transcript?toolUseId={meta['toolUseId']}", agent.read_bytes(),
                       "application/x-ndjson")
        yield Post(run, "/ingest/claude-code-transcript", (where / "session.jsonl").read_bytes(), "application/x-ndjson")
        yield Post(run, "/ingest/claude-code", (where / "stdout.ndjson").read_bytes(), "application/x-ndjson")
    yield Post("c-bench-k", "/ingest/claude-code", _fixed_uuids(cli_lines, "msg_bench_k"), "application/x-ndjson")


def _fixed_uuids(make: Any, *args: Any) -> bytes:
    """``make(*args)`` with the same uuids at every run (the benchmark's bodies draw them)."""
    import uuid
    from unittest import mock

    numbers = iter(range(1, 1 << 30))
    with mock.patch.object(uuid, "uuid4", lambda: uuid.UUID(int=next(numbers))):
        body: bytes = make(*args)
    return body


async def _record(out: Path) -> None:
    import httpx

    from lastword.main import create_app
    from lastword.settings import Settings

    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="lastword-answers-") as directory:
        database = Path(directory) / "answers.db"
        app = create_app(Settings(database_url=f"sqlite:///{database}"), clock=lambda: START)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://answers") as client:
                created: set[str] = set()
                for post in [*_provider_posts(), *_cli_posts()]:
                    if post.run not in created:
                        mode = "continuable" if post.run.endswith("-resume") else "oneshot"
                        answer = await client.post("/v1/runs", json={"runId": post.run, "leaseSeconds": 0, "mode": mode})
                        assert answer.status_code == 201, answer.text
                        created.add(post.run)

                    async def pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
                        for start in range(0, len(body), size):
                            yield body[start : start + size]

                    content: Any = pieces(post.body, post.piece) if post.piece else post.body
                    answer = await client.post(f"/v1/runs/{post.run}{post.path}", content=content,
                                               headers={"content-type": post.content_type, **post.headers})
                    records.append({"post": f"{post.run}{post.path} piece={post.piece}", "status": answer.status_code,
                                    "answer": answer.content.decode()})
                runs = sorted(created) + _children(database)
                for run in runs:
                    after = 0
                    while True:
                        page = await client.get(f"/v1/runs/{run}/events", params={"after": after, "limit": 1000})
                        records.append({"get": f"{run}/events?after={after}", "status": page.status_code,
                                        "answer": page.content.decode()})
                        if page.status_code != 200 or not page.json()["events"]:
                            break
                        after = page.json()["nextAfter"]
        with sqlite3.connect(database) as db:
            for row in db.execute("SELECT run_id, seq, type, event_id, body FROM events ORDER BY run_id, seq"):
                records.append({"stored": f"{row[0]}#{row[1]} {row[2]} {row[3]}", "body": row[4]})
    out.write_text(json.dumps(records, indent=0, ensure_ascii=False))
    print(f"{len(records)} records written to {out}")


def _children(database: Path) -> list[str]:
    """The child runs the bodies made (subagents), by id."""
    with sqlite3.connect(database) as db:
        return sorted(row[0] for row in db.execute("SELECT run_id FROM runs WHERE parent_run_id IS NOT NULL"))


def compare(first: Path, second: Path) -> int:
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    differing = [(x, y) for x, y in zip(a, b, strict=False) if x != y]
    for x, y in differing[:5]:
        print(f"- {x}\n+ {y}\n")
    print(f"{len(a)} and {len(b)} records; {len(differing)} differ")
    return 1 if differing or len(a) != len(b) else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.adapter_answers", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?", help="where to write the records")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two files of records")
    args = parser.parse_args(argv)
    if args.compare:
        sys.exit(compare(*args.compare))
    if args.out is None:
        parser.error("give OUT or --compare A B")
    asyncio.run(_record(args.out))


if __name__ == "__main__":
    main()
