"""Reading provider bodies (``lastword.adapters.framing``): the events come out whatever the pieces."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.adapters.framing import provider_events
from lastword.errors import BadRequest, Unprocessable

SSE = (b'event: a\r\ndata: {"type": "a",\r\ndata:  "n": 1}\r\n\r\n'  # CRLF, data over two lines
       b": a comment\n\nevent: ping\ndata: {\"type\": \"ping\"}\n\n"
       b"data: [DONE]\n\n"
       b'data: {"type": "\xc3\xa9t\xc3\xa9"}\n\n'  # UTF-8 that pieces may split
       b'data: {"type": "unfinished"}\n')  # no closing blank line: incomplete, dropped
EXPECTED = [{"type": "a", "n": 1}, {"type": "ping"}, {"type": "été"}]


def read(body: bytes, cuts: list[int], framing: str = "sse") -> list[tuple[int, Any]]:
    async def pieces() -> AsyncIterator[bytes]:
        at = 0
        for cut in sorted(set(cuts)):
            yield body[at:cut]
            at = cut
        yield body[at:]

    async def collect() -> list[tuple[int, Any]]:
        return [item async for item in provider_events(pieces(), framing)]

    return asyncio.run(collect())


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, len(SSE)), max_size=12))
def test_sse_messages_are_the_same_in_any_pieces(cuts: list[int]) -> None:
    """CRLF lines, multi-line data, comments, [DONE] and split UTF-8 read the same whatever the piece boundaries."""
    assert read(SSE, cuts) == list(enumerate(EXPECTED))


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, 60), max_size=6))
def test_ndjson_lines_in_any_pieces(cuts: list[int]) -> None:
    """NDJSON lines split anywhere give the same events; blank lines are not events."""
    body = b'{"type": "x"}\n\n{"type": "y"}\r\n{"type": "z"}'
    assert read(body, cuts, "ndjson") == [(0, {"type": "x"}), (1, {"type": "y"}), (2, {"type": "z"})]


def test_problems_name_the_event() -> None:
    """Bad JSON is a 400 and a non-object a 422, each naming the event's index; bad UTF-8 is a 400."""
    with pytest.raises(BadRequest) as bad_json:
        read(b'data: {"type": "a"}\n\ndata: {oops\n\n', [])
    assert bad_json.value.extra["index"] == 1
    with pytest.raises(Unprocessable) as not_object:
        read(b'[{"type": "a"}, 3]', [], "json")
    assert not_object.value.extra["index"] == 1
    with pytest.raises(BadRequest) as not_utf8:
        read(b'data: {"type": "\xff"}\n\n', [])
    assert not_utf8.value.code == "invalid_utf8"
