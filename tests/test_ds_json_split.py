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
