"""A JSON-mode body cut into its messages (``lastword.rules.ds.json_messages``) needs no server:
a compactly written array, taken by its fast way, gives what the parser gives, refusals included."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.errors import DsRefusal
from lastword.rules import ds

LIMIT = 8

scalars = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)


def _written(array: list[Any], how: str) -> bytes:
    if how == "orjson":
        try:
            return orjson.dumps(array)
        except TypeError:  # an integer past 64 bits: orjson writes none
            how = "compact"
    if how == "compact":  # as JSON.stringify writes (Python's floats and escapes differ from orjson's)
        return json.dumps(array, separators=(",", ":"), ensure_ascii=False).encode()
    return json.dumps(array).encode()  # spaces after the separators


def _messages(split: Any, body: bytes) -> tuple[str, Any]:
    try:
        return "messages", split(body)
    except DsRefusal as refusal:
        return "refused", (refusal.reason, refusal.detail)


@settings(max_examples=400, deadline=None)
@given(st.lists(values, max_size=LIMIT + 2), st.sampled_from(["orjson", "compact", "spaced"]),
       st.sampled_from([b"", b" ", b"[", b"]", b",", b"0", b"-0", b"1.50", b"1e5", b"\\u00e9", b"\\ud800"]),
       st.integers(0, 400))
def test_a_json_body_is_cut_as_the_parser_cuts_it(array: list[Any], how: str, insert: bytes, at: int) -> None:
    """Any body, written compactly or not and with bytes put in anywhere, gives the parser's messages
    (each the exact text of one value), or the same refusal: not JSON, or over the message limit."""
    body = _written(array, how)
    body = body[:at] + insert + body[at:]
    fast = _messages(lambda raw: ds.json_messages(raw, limit=LIMIT), body)
    assert fast == _messages(lambda raw: ds.parsed_messages(raw, LIMIT), body)


def test_a_deeply_nested_body_is_refused_as_the_parser_refuses_it() -> None:
    """Nesting past what the parser can read is refused whichever way the array is written."""
    for depth in [400, 1500, 5000, *range(850, 1030, 5)]:  # the parser's own bound is near 1000
        body = b"[" * depth + b"]" * depth
        assert _messages(ds.json_messages, body) == _messages(lambda raw: ds.parsed_messages(raw, None), body)


written_by_orjson = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)


@given(st.lists(written_by_orjson, max_size=LIMIT))
def test_an_array_as_orjson_writes_it_is_cut_the_fast_way(array: list[Any]) -> None:
    """The body a client writes with orjson or JSON.stringify (compact, shortest forms) is cut by
    the fast way: each message is orjson's text of one element, the parser not needed."""
    body = orjson.dumps(array)
    assert ds.compact_messages(body, LIMIT) == [orjson.dumps(value) for value in array]
    assert ds.compact_messages(body, None) == [orjson.dumps(value) for value in array]


def test_the_fast_way_leaves_to_the_parser_what_it_cannot_take_whole() -> None:
    """Spaces, a body that is no array, an array past the limit (the parser refuses it, naming the
    limit) and more brackets and braces than COMPACT_NESTING all go to the parser; up to the
    limit and up to the bound they do not."""
    assert ds.compact_messages(b"[1,2]", 2) == [b"1", b"2"]
    assert ds.compact_messages(b"[1,2,3]", 2) is None
    assert ds.compact_messages(b"[1, 2]", None) is None
    assert ds.compact_messages(b'{"a":1}', None) is None
    assert ds.compact_messages(b" [1]", None) is None
    for element in (b"[]", b"{}"):
        most = b"[" + b",".join([element] * (ds.COMPACT_NESTING - 1)) + b"]"  # the bound, with the outer [
        assert ds.compact_messages(most, None) == [element] * (ds.COMPACT_NESTING - 1)
        assert ds.compact_messages(b"[" + b",".join([element] * ds.COMPACT_NESTING) + b"]", None) is None
