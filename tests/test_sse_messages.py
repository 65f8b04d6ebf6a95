"""How one event is framed as an SSE message (SPEC §8): the JSON fast path frames every value as
the general encoder does, whatever its strings hold."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st
from lastword.http.sse import encode, json_message

#: Strings heavy in what SSE framing is about: CR, LF (and so CRLF), and lookalikes it must leave alone.
_TEXT = st.text(alphabet=st.sampled_from(["a", " ", ":", "\r", "\n", "\u2028", "\u0085", "\x00", "é", "😀"]))
_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | _TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=12,
)


@given(value=_JSON, event=_TEXT, message_id=st.integers(0, 2**63 - 1))
def test_a_json_message_is_framed_as_the_general_encoder_frames_it(value: Any, event: str, message_id: int) -> None:
    data = orjson.dumps(value)
    assert json_message(data, event=event, id=message_id) == encode(data.decode(), event=event, id=message_id)
