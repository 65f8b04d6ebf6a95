"""The exact-integer rule (``lastword.rules.exact_ints``), pure: which integers are kept, and where
the first one that would not be is named. The HTTP paths are in ``tests/test_exact_ingest.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import orjson
from lastword.errors import NumberOutOfRange, TooDeeplyNested
from lastword.ingest.checks import MAX_NESTING, storable_json
from lastword.rules.exact_ints import MAX_EXACT_INT, MIN_EXACT_INT, check_exact, first_inexact, may_hold_inexact

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("ab", max_size=2), inner, max_size=3),
    max_leaves=10,
)


def naive_first(value: Any, path: str = "") -> str | None:
    """A second reading of the rule: the path of the first integer outside the range, recursively."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return path if value < MIN_EXACT_INT or value > MAX_EXACT_INT else None
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, item in children:
        found = naive_first(item, f"{path}.{key}" if isinstance(value, dict) else f"{path}[{key}]")
        if found is not None:
            return found
    return None


@settings(max_examples=300, deadline=None)
@given(value=values, as_text=st.booleans())
def test_the_first_inexact_integer_is_found_where_a_naive_walk_finds_it(value: Any, as_text: bool) -> None:
    """For any JSON value, the path found is the first out-of-range integer's, in document order."""
    raw = json.dumps(value)
    expected = naive_first(value)
    assert first_inexact(raw if as_text else raw.encode(), items=False) == (None if expected is None else (0, expected))


@settings(max_examples=200, deadline=None)
@given(items=st.lists(values, max_size=5))
def test_an_array_s_items_are_numbered(items: list[Any]) -> None:
    """With items, the answer names the first item holding one, and the path inside it."""
    found = next(((at, path) for at, item in enumerate(items) if (path := naive_first(item)) is not None), None)
    assert first_inexact(json.dumps(items).encode(), items=True) == found


@pytest.mark.parametrize(("number", "kept"), [
    (MAX_EXACT_INT, True), (MAX_EXACT_INT + 1, False), (MIN_EXACT_INT, True), (MIN_EXACT_INT - 1, False),
    (10**18, True), (-(10**18), True),
])
def test_the_range_is_exactly_what_orjson_keeps(number: int, kept: bool) -> None:
    """The bounds are [-2**63, 2**64 - 1], both ends included."""
    assert first_inexact(f'{{"n": {number}}}', items=False) == (None if kept else (0, ".n"))


def test_only_a_run_of_19_digits_may_hold_one() -> None:
    """18 digits never need the second reading; 19 in a row (also inside a string) may."""
    assert not may_hold_inexact(b"123456789012345678") and not may_hold_inexact("123456789012345678")
    assert may_hold_inexact(b"1234567890123456789") and may_hold_inexact('"x1234567890123456789"')
    assert first_inexact('"1234567890123456789012"', items=False) is None
    assert first_inexact("12345678901234567890123", items=False) == (0, "")


def naive_has_run(text: str) -> bool:
    """A second reading of the pre-check: 19 ASCII digits in a row, counted one character at a time."""
    run = 0
    for char in text:
        run = run + 1 if char in "0123456789" else 0
        if run == 19:
            return True
    return False


# ASCII digits, other scripts' digits (not JSON's), other characters and a lone surrogate.
digit_heavy = st.text(st.sampled_from("0123456789" * 8 + "٣３𝟗x -\"\ud800é"), max_size=60)


@settings(max_examples=500, deadline=None)
@given(text=digit_heavy)
def test_the_pre_check_finds_exactly_the_runs_of_19_ascii_digits(text: str) -> None:
    """For any text, as str and (when it is UTF-8) as bytes: a run of 19 ASCII digits, and only that."""
    expected = naive_has_run(text)
    assert may_hold_inexact(text) is expected
    if "\ud800" not in text:
        assert may_hold_inexact(text.encode()) is expected


def test_check_exact_names_the_event_and_the_field() -> None:
    """The refusal names the event's index (counted from first_index) and the field's path."""
    with pytest.raises(NumberOutOfRange) as error:
        check_exact(b'[{"a": 1}, {"b": [0, 99999999999999999999]}]', items=True, first_index=3)
    assert (error.value.extra["index"], error.value.extra["field"]) == (4, "b[1]")
    assert error.value.detail.startswith("event 4: b[1]: the integer is outside")
    with pytest.raises(NumberOutOfRange) as error:
        check_exact(b"99999999999999999999")
    assert error.value.extra == {"field": "body"} and error.value.detail.startswith("body: ")
    check_exact(b'{"a": 18446744073709551615}', first_index=0)


def test_nesting_too_deep_to_read_again_is_too_deeply_nested() -> None:
    """~1,000 levels around a long number: too_deeply_nested (with the event's index when it has one), never RecursionError."""
    deep = "[" * 1000 + "12345678901234567890" + "]" * 1000
    with pytest.raises(TooDeeplyNested) as error:
        check_exact(deep.encode(), first_index=2)
    assert error.value.extra["index"] == 2 and error.value.detail.startswith("event 2 ")
    with pytest.raises(TooDeeplyNested) as error:
        check_exact(("[" + deep + "]").encode(), items=True, first_index=0)
    assert "index" not in error.value.extra
    with pytest.raises(TooDeeplyNested) as error:
        first_inexact(deep, items=False)
    assert error.value.detail == "the JSON nests too deeply to be read exactly or stored"
    # Deep, but not past what Python reads: walked without recursion.
    assert first_inexact("[" * 500 + "99999999999999999999" + "]" * 500, items=False) == (0, "[0]" * 500)


@given(depth=st.integers(MAX_NESTING - 4, MAX_NESTING + 6) | st.integers(0, 300),
       padding=st.lists(st.sampled_from(["[", "{", "]", "}", "a"]), max_size=300),
       siblings=st.integers(0, 3), lists_every=st.integers(1, 3))
def test_a_value_is_stored_exactly_when_it_nests_no_deeper_than_the_limit(depth: int, padding: list[str],
                                                                          siblings: int, lists_every: int) -> None:
    """Brackets in strings and containers beside the deepest path count for nothing: a value is
    refused as too deeply nested exactly when its nesting passes MAX_NESTING, and stored as
    its compact JSON otherwise."""
    value: Any = "".join(padding)
    for level in range(depth):
        if level % lists_every:
            value = {"k": value, **{f"s{n}": {} for n in range(siblings)}}
        else:
            value = [value, *([[]] * siblings)]
    deepest = depth + (1 if siblings and depth else 0)
    if deepest <= MAX_NESTING:
        assert storable_json(value) == orjson.dumps(value)
    else:
        with pytest.raises(TooDeeplyNested):
            storable_json(value)
