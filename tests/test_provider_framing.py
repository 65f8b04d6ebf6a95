"""Reading provider bodies (``lastword.adapters.framing``): the events come out whatever the pieces."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from httpx_sse._decoders import SSEDecoder
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


#: Lines of every kind the SSE standard names, data that spans lines, and near misses of ``data``.
SSE_LINES = ['data: {"a": 1}', 'data:{"b": 2}', 'data:  {"c": 3}', "data", "data:", "data: ", 'data: {"d":',
             "data: 4}", "data: [DONE]", "event: x", "id: 7", "retry: 5", ": a comment", 'dat: {"e": 5}',
             'database: {"f": 6}', 'data {"g": 7}', 'DATA: {"h": 8}', "", ""]


def httpx_sse_reading(lines: list[str]) -> list[tuple[int, Any]] | int:
    """What the body's events are as httpx-sse's own message decoder reads its lines: the events,
    or the index of the first one that is not a JSON object."""
    decoder, found = SSEDecoder(), []
    for line in lines:
        message = decoder.decode(line)
        if message is not None and message.data and message.data != "[DONE]":
            found.append(message.data)
    events = []
    for index, data in enumerate(found):
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            return index
        if not isinstance(value, dict):
            return index
        events.append((index, value))
    return events


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(st.sampled_from(SSE_LINES), max_size=24), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_sse_data_is_read_as_httpx_sse_reads_it(lines: list[str], cuts: list[int]) -> None:
    """The messages' data, gathered from the lines here, is what httpx-sse's message decoder makes of them."""
    body = "".join(line + "\n" for line in lines).encode()
    expected = httpx_sse_reading(lines)
    if isinstance(expected, int):
        with pytest.raises((BadRequest, Unprocessable)) as problem:
            read(body, [cut for cut in cuts if cut <= len(body)])
        assert problem.value.extra["index"] == expected
    else:
        assert read(body, [cut for cut in cuts if cut <= len(body)]) == expected


#: Messages as providers send them (read by the regular expressions of ``framing``), and others.
SSE_MESSAGES = ['event: a\ndata: {"a": 1}\n\n', 'data: {"b": 2}\n\n', "event: ping\ndata: {}\n\n", "data: [DONE]\n\n",
                "data: \n\n", 'data:{"c": 3}\n\n', 'data: {"d":\ndata: 4}\n\n', ": note\n\n", "\n",
                'id: 1\ndata: {"e": 5}\n\n', 'data: {"f": 6}\r\n\r\n', 'event: x\ndata:  {"g": 7}\n\n', "data: 8\n\n",
                # "data: " where it is no field: in an event's name, inside a data value.
                'event: data: {"x": 0}\ndata: {"h": "data: {}"}\n\n', 'event: data: \ndata: {"i": 9}\n\n']


@settings(max_examples=300, deadline=None)
@given(messages=st.lists(st.sampled_from(SSE_MESSAGES), max_size=30), cuts=st.lists(st.integers(0, 500), max_size=8))
def test_plain_messages_are_read_as_httpx_sse_reads_them(messages: list[str], cuts: list[int]) -> None:
    """Runs of messages of the usual shape, cut anywhere, between and inside other kinds: read as httpx-sse reads them."""
    text = "".join(messages)
    body = text.encode()
    expected = httpx_sse_reading(text.replace("\r\n", "\n").split("\n"))
    if isinstance(expected, int):
        with pytest.raises((BadRequest, Unprocessable)) as problem:
            read(body, [cut for cut in cuts if cut <= len(body)])
        assert problem.value.extra["index"] == expected
    else:
        assert read(body, [cut for cut in cuts if cut <= len(body)]) == expected
