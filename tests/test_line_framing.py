"""The one NDJSON line splitter (``lastword.adapters.framing.body_lines``), through the module.

Whatever the pieces a body comes in, the lines are the body's lines, each batch's ``exact`` flag
says truly whether its lines hold a run of 19 digits, and with a line limit the first line over
it is refused after every line before it was handed on — a line still unfinished included.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.adapters.framing import body_lines, json_lines
from lastword.errors import LineTooLarge, MalformedJson, Unprocessable
from lastword.rules.exact_ints import may_hold_inexact

# Lines of a few kinds: blank, short, long, with a run of 19 digits (which a cut may split).
LINE = st.sampled_from([b"", b"{}", b'{"a": 1}', b"x" * 30, b'{"n": 12345678901234567890}', b"\r"])


def cut(body: bytes, cuts: list[int]) -> list[bytes]:
    at, out = 0, []
    for point in sorted(set(cuts)):
        out.append(body[at:point])
        at = point
    out.append(body[at:])
    return out


def split(parts: list[bytes], max_line: int | None) -> tuple[list[bytes], list[bool], LineTooLarge | None]:
    async def pieces() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    async def collect() -> tuple[list[bytes], list[bool], LineTooLarge | None]:
        lines: list[bytes] = []
        flags: list[bool] = []
        try:
            async for batch, exact in body_lines(pieces(), max_line):
                assert batch
                assert exact == (not any(may_hold_inexact(line) for line in batch)), batch
                lines.extend(batch)
                flags.append(exact)
        except LineTooLarge as error:
            return lines, flags, error
        return lines, flags, None

    return asyncio.run(collect())


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINE, max_size=8), ends_open=st.booleans(), cuts=st.lists(st.integers(0, 250), max_size=10))
def test_lines_in_any_pieces(lines: list[bytes], ends_open: bool, cuts: list[int]) -> None:
    body = b"\n".join(lines) + (b"" if ends_open or not lines else b"\n")
    got, _, problem = split(cut(body, cuts), None)
    expected = body.split(b"\n")
    if not expected[-1]:
        expected.pop()  # a body ending with its newline has no line after it
    assert problem is None
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(LINE, max_size=8), ends_open=st.booleans(), cuts=st.lists(st.integers(0, 250), max_size=10),
       max_line=st.integers(0, 32))
def test_the_first_line_over_the_limit_is_refused_after_the_lines_before_it(
        lines: list[bytes], ends_open: bool, cuts: list[int], max_line: int) -> None:
    body = b"\n".join(lines) + (b"" if ends_open or not lines else b"\n")
    got, _, problem = split(cut(body, cuts), max_line)
    expected = body.split(b"\n")
    if not expected[-1]:
        expected.pop()
    over = next((at for at, line in enumerate(expected) if len(line) > max_line), None)
    if over is None:
        assert problem is None and got == expected
    else:
        assert problem is not None and problem.extra["limit"] == max_line
        assert got == expected[:over]


def test_an_unfinished_line_is_refused_as_soon_as_it_passes_the_limit() -> None:
    """Its end never comes: the pieces after the one that passed the limit are not read."""
    read: list[bytes] = []

    async def pieces() -> AsyncIterator[bytes]:
        for part in [b'{"a": 1}\n', b"x" * 6, b"x" * 6, b"never read"]:
            read.append(part)
            yield part

    async def collect() -> list[bytes]:
        lines: list[bytes] = []
        with pytest.raises(LineTooLarge) as refused:
            async for batch, _ in body_lines(pieces(), 10):
                lines.extend(batch)
        assert refused.value.detail == "a line is longer than 10 bytes"
        return lines

    assert asyncio.run(collect()) == [b'{"a": 1}']
    assert read[-1] == b"x" * 6


def test_json_lines_name_the_line_over_the_limit() -> None:
    async def pieces() -> AsyncIterator[bytes]:
        yield b'{"a": 1}\n\n{"b": 2}\n{"c": "' + b"x" * 40

    async def collect() -> list[tuple[int, object]]:
        values: list[tuple[int, object]] = []
        with pytest.raises(LineTooLarge) as refused:
            async for batch in json_lines(pieces(), noun="line", max_line=20):
                values.extend(batch)
        assert refused.value.extra == {"index": 2, "limit": 20}
        assert refused.value.detail == "line 2 is longer than 20 bytes"
        return values

    assert asyncio.run(collect()) == [(0, {"a": 1}), (1, {"b": 2})]


def values(body: bytes, **options: str) -> tuple[list[tuple[int, object]], Exception | None]:
    async def pieces() -> AsyncIterator[bytes]:
        yield body

    async def collect() -> tuple[list[tuple[int, object]], Exception | None]:
        got: list[tuple[int, object]] = []
        try:
            async for batch in json_lines(pieces(), **options):
                got.extend(batch)
        except (MalformedJson, Unprocessable) as error:
            return got, error
        return got, None

    return asyncio.run(collect())


@pytest.mark.parametrize("noun", [None, "line"])
def test_json_lines_name_a_line_that_is_not_json(noun: str | None) -> None:
    got, problem = values(b'{"a": 1}\n\n{oops\n{"b": 2}\n', **({} if noun is None else {"noun": noun}))
    assert got == [(0, {"a": 1})]
    assert isinstance(problem, MalformedJson) and problem.extra == {"index": 1}
    assert problem.detail.startswith(f"{noun or 'event'} 1 is not valid JSON")


def test_json_lines_refuse_an_inexact_integer_naming_its_line() -> None:
    got, problem = values(b'{"a": 1}\n{"n": 123456789012345678901234}\n')
    assert got == [(0, {"a": 1})]
    assert isinstance(problem, Unprocessable) and problem.code == "number_out_of_range"
    assert problem.extra["index"] == 1
