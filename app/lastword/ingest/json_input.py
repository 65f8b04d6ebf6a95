"""Reading JSON request bodies exactly, and big arrays a slice at a time.

Exact numbers: the rule of :mod:`lastword.rules.exact_ints` (an integer orjson would change is
refused with 422 ``number_out_of_range``, naming the event's index and the field's path), the
one every ingest path applies.

Slices. One ``orjson.loads`` of a 16 MB array holds the interpreter (and the event loop) for a
quarter of a second and validating it in one call for more, so a JSON array larger than
:data:`WHOLE_BYTES` is cut at its
top-level commas into slices of about :data:`SLICE_BYTES`, each parsed (and, by the caller,
validated) on its own, with the event loop free between them. The cutting only finds strings
and brackets (a regular expression does the scanning); whether each slice is valid JSON is
orjson's to say, so what is accepted is exactly what a whole-body parse accepts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

from lastword.errors import MalformedJson
from lastword.rules.exact_ints import MAX_EXACT_INT, MIN_EXACT_INT, check_exact, may_hold_inexact

__all__ = ["MAX_EXACT_INT", "MIN_EXACT_INT", "SLICE_BYTES", "WHOLE_BYTES", "array_slices", "check_exact", "loads",
           "loads_events", "malformed", "may_hold_inexact", "parse_slice", "refuse_inexact"]

#: About this many bytes of a JSON array are parsed (and validated) at a time: a few
#: milliseconds of work each (scanning, parsing, validating), then the event loop runs.
SLICE_BYTES = 64 * 1024
#: A body up to this size is parsed in one call: a few milliseconds at most, and the cutting
#: (a Python loop over every string and bracket) would cost more than it saves: a fifth of
#: a 1,000-event batch's time went to it.
WHOLE_BYTES = 4 * SLICE_BYTES

# A string (escapes included) or one structural character; everything else is skipped.
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[][{},]', re.DOTALL)
_WHITESPACE = b" \t\r\n"
_LEADING_SPACE = re.compile(rb"[ \t\r\n]*")


def malformed(error: orjson.JSONDecodeError | ValueError, where: str = "the body") -> MalformedJson:
    return MalformedJson(f"{where} is not valid JSON: {error}")


def loads(raw: bytes, *, index: int | None = None) -> Any:
    """``raw`` parsed; 400 if it is not JSON, 422 if it holds an integer orjson would change.

    ``index`` is the position of the value in a batch (an NDJSON line), named in the problem.
    """
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise malformed(error) from None
    refuse_inexact(raw, index=index)
    return value


def loads_events(raw: bytes) -> list[Any]:
    """A small body's events, parsed in one call: an array's items, or the one event it is.
    400 if it is not JSON, 422 naming the event's index if an integer would be changed."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise malformed(error) from None
    if isinstance(value, list):
        check_exact(raw, items=True, first_index=0)
        return value
    refuse_inexact(raw, index=0)
    return [value]


def refuse_inexact(raw: bytes, *, index: int | None) -> None:
    """422 if ``raw`` (one value, already parsed by orjson) holds an integer orjson changed."""
    check_exact(raw, items=False, first_index=index)


def array_slices(raw: bytes | bytearray, budget: int = SLICE_BYTES) -> Iterator[bytes] | None:
    """The items of a top-level JSON array as slices of about ``budget`` bytes; None if
    ``raw`` is not an array. Each slice is the items' text joined by commas, to be parsed as
    ``b"[" + slice + b"]"``. A malformed body may be cut anywhere: its slices do not parse.
    ``raw`` may be the ``bytearray`` the body was received into (no whole copy of it is made)."""
    leading = _LEADING_SPACE.match(raw)  # no copy of a 16 MB body, unlike lstrip()
    start = leading.end() if leading else 0
    if raw[start : start + 1] != b"[":
        return None
    return _slices(raw, start + 1, budget)


def _slices(raw: bytes | bytearray, begin: int, budget: int) -> Iterator[bytes]:
    depth = 1
    piece_start = begin
    for match in _TOKENS.finditer(raw, begin):
        char = raw[match.start()]
        if char == 0x22:  # '"': a string, skipped whole
            continue
        if char in b"[{":
            depth += 1
        elif char in b"]}":
            depth -= 1
            if depth == 0:
                if raw[match.end():].strip(_WHITESPACE):
                    raise MalformedJson("the body is not valid JSON: data after the array")
                last = bytes(raw[piece_start : match.start()])
                if last.strip(_WHITESPACE) or piece_start > begin:
                    yield last
                return
        elif depth == 1 and match.start() - piece_start >= budget:
            yield bytes(raw[piece_start : match.start()])
            piece_start = match.end()
    raise MalformedJson("the body is not valid JSON: the array is not closed")


def parse_slice(piece: bytes, first_index: int) -> list[Any]:
    """The items of one slice of an array (see :func:`array_slices`), exactly."""
    raw = b"[" + piece + b"]"
    try:
        items = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise malformed(error) from None
    if not items:  # only an empty array has no item, and it yields no slice
        raise MalformedJson("the body is not valid JSON: an empty item in the array")
    if may_hold_inexact(piece):
        check_exact(raw, items=True, first_index=first_index)
    return list(items)
