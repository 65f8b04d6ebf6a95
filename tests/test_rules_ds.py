"""The Durable Streams rules (``lastword.rules.ds``, SPEC §17), pure: offsets, the headers a
client sends (content types, ``Stream-Closed``, TTL and expiry, producers), JSON mode, cursors,
ETags, expiry and what a read reports. Each rule is checked as the protocol (``PROTOCOL.md`` of
durable-streams) states it, through the functions the store and the faces call; a refusal is
checked by what a client sees of it: its reason (the status a face makes of it), its facts (the
headers) and its detail (the problem document). The same rules over HTTP are in
``tests/test_durable_streams.py`` (the protocol's conformance suite) and
``tests/store_contract.py``."""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Any, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lastword.errors import DsRefusal
from lastword.rules import ds

#: Positions an offset can name (16 decimal digits).
positions = st.integers(min_value=0, max_value=10**ds.OFFSET_DIGITS - 1)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


def refused(rule: Callable[..., Any], *args: Any, **kwargs: Any) -> DsRefusal:
    """The refusal ``rule(*args)`` raises (the test fails if it answers instead)."""
    with pytest.raises(DsRefusal) as caught:
        rule(*args, **kwargs)
    return caught.value


def state(*, ttl: int | None = None, expires_epoch: float | None = None, touched_at: float = 1000.0,
          tail: int = 0) -> ds.StreamState:
    return ds.StreamState(path="s", uid="u1", content_type="text/plain", ttl=ttl, expires_at=None,
                          expires_epoch=expires_epoch, closed=False, deleted=False, tail=tail,
                          touched_at=touched_at)


# -- offsets (protocol §6) -----------------------------------------------------------------------


def test_the_start_is_the_offset_the_conformance_suite_writes_by_hand() -> None:
    """Offset 0 is sixteen zeros, an underscore and sixteen zeros; the next ones count entries."""
    assert ds.offset(0) == "0000000000000000_0000000000000000"
    assert ds.offset(1) == "0000000000000000_0000000000000001"
    assert ds.offset(1234) == "0000000000000000_0000000000001234"


@given(position=positions)
def test_an_offset_names_the_position_it_was_made_for(position: int) -> None:
    """Every offset handed out reads back as its position, and is a single URL-safe token that
    is neither sentinel."""
    text = ds.offset(position)
    assert ds.position_of(text) == position
    assert ds.parse_offset(text, tail=position) == position
    assert text not in (ds.START, ds.NOW)
    assert not set(text) & set(",&=?/") and len(text) < 256


@given(first=positions, second=positions)
def test_offsets_sort_as_the_positions_they_name(first: int, second: int) -> None:
    """Lexicographic order of offsets is the stream's order (protocol §6, "lexicographically
    sortable", "strictly increasing")."""
    assert (ds.offset(first) < ds.offset(second)) == (first < second)
    assert (ds.offset(first) == ds.offset(second)) == (first == second)


@pytest.mark.parametrize("text", [
    "-1", "now", "", "0", "12", "0_1",
    "0000000000000001_0000000000000000",      # the first field is always zero here
    "0000000000000000_000000000000001",       # fifteen digits
    "0000000000000000_00000000000000001",     # seventeen
    "000000000000000_0000000000000001",
    "0000000000000000-0000000000000001",
    "0000000000000000_000000000000000a",
    " 0000000000000000_0000000000000001",
    "0000000000000000_0000000000000001\n",
    "x0000000000000000_0000000000000001",
])
def test_text_that_is_not_an_offset_of_ours_names_no_position(text: str) -> None:
    """Only the exact shape this server hands out names a position."""
    assert ds.position_of(text) is None


def test_an_absent_offset_or_minus_one_reads_from_the_start() -> None:
    """``-1`` is the stream's beginning, the same as no offset at all."""
    assert ds.parse_offset(None, tail=5) == 0
    assert ds.parse_offset("-1", tail=5) == 0
    assert ds.parse_offset("-1", tail=0) == 0


def test_now_is_the_tail_whatever_the_stream_holds() -> None:
    """``now`` is passed on as such: the reader skips to the tail."""
    assert ds.parse_offset("now", tail=7) == "now"
    assert ds.parse_offset("now", tail=0) == "now"


@given(tail=positions, data=st.data())
def test_an_offset_up_to_the_tail_is_read_from_and_one_past_it_refused(tail: int, data: st.DataObject) -> None:
    """An offset at or before the tail is where the read starts; one past it was never handed
    out, so it is a bad request."""
    before = data.draw(st.integers(min_value=0, max_value=tail))
    assert ds.parse_offset(ds.offset(before), tail) == before
    if tail < 10**ds.OFFSET_DIGITS - 1:
        past = ds.offset(data.draw(st.integers(min_value=tail + 1, max_value=10**ds.OFFSET_DIGITS - 1)))
        refusal = refused(ds.parse_offset, past, tail)
        assert refusal.reason == "invalid"
        assert str(refusal) == f"offset {past!r} is past the stream's tail"


@pytest.mark.parametrize("text", ["0_0", "abc", "-2", "NOW", "0000000000000001_0000000000000000"])
def test_an_offset_this_server_did_not_hand_out_is_a_bad_request(text: str) -> None:
    """A malformed offset, or another server's, is refused as invalid, and the detail names it."""
    refusal = refused(ds.parse_offset, text, 10)
    assert refusal.reason == "invalid"
    assert str(refusal) == f"offset {text!r} is not one this server hands out"


# -- content types and Stream-Closed (protocol §5, §7) -------------------------------------------


@pytest.mark.parametrize(("header", "kind"), [
    (None, ""),
    ("", ""),
    ("text/plain", "text/plain"),
    ("Application/JSON; charset=utf-8", "application/json"),
    ("  text/HTML ;q=1", "text/html"),
    ("application/octet-stream;", "application/octet-stream"),
    ("application/json; charset=utf-8; profile=x", "application/json"),
])
def test_a_content_type_is_compared_by_its_media_type(header: str | None, kind: str) -> None:
    """Parameters, case and surrounding space do not change which content type a stream has."""
    assert ds.media_type(header) == kind


@pytest.mark.parametrize(("header", "json_mode"), [
    ("application/json", True),
    ("APPLICATION/JSON; charset=utf-8", True),
    (" application/json ", True),
    ("application/jsonl", False),
    ("application/ndjson", False),
    ("text/json", False),
    ("", False),
])
def test_json_mode_is_application_json_only(header: str, json_mode: bool) -> None:
    """Only ``application/json`` streams keep message boundaries (protocol §7.1)."""
    assert ds.is_json(header) is json_mode


@pytest.mark.parametrize(("header", "base64_data"), [
    ("text/plain", False),
    ("Text/Markdown; charset=utf-8", False),
    ("application/json", False),
    ("application/octet-stream", True),
    ("application/ndjson", True),
    ("image/png", True),
    ("", True),
    ("texts/plain", True),
])
def test_sse_carries_text_and_json_as_they_are_and_anything_else_as_base64(header: str, base64_data: bool) -> None:
    """SSE's text frames can carry ``text/*`` and JSON streams as written; other bytes go as base64."""
    assert ds.sse_base64(header) is base64_data


@pytest.mark.parametrize(("value", "closed"), [
    ("true", True), ("TRUE", True), (" True ", True),
    (None, False), ("", False), ("false", False), ("1", False), ("yes", False), ("truee", False), ("t", False),
])
def test_stream_closed_counts_only_when_true(value: str | None, closed: bool) -> None:
    """``Stream-Closed: true`` (any case) closes; any other value is as if the header were absent."""
    assert ds.flag(value) is closed


# -- Stream-TTL and Stream-Expires-At (protocol §5.1) --------------------------------------------


def test_no_ttl_header_is_no_ttl() -> None:
    """A stream created without ``Stream-TTL`` has none."""
    assert ds.parse_ttl(None) is None


@given(seconds=st.integers(min_value=0, max_value=ds.MAX_SAFE))
def test_a_ttl_in_plain_decimal_is_that_many_seconds(seconds: int) -> None:
    """Any whole number up to 2^53-1 written in plain decimal is accepted as it is."""
    assert ds.parse_ttl(str(seconds)) == seconds


@pytest.mark.parametrize("value", ["+60", "-1", "00060", "1e3", "60.5", "abc", "", " 60", "60 ", "0x10", "٦٠"])
def test_a_ttl_in_any_other_notation_is_refused(value: str) -> None:
    """No sign, leading zero, decimal point or exponent (the protocol's own examples), and not
    empty: a bad request that names the value."""
    refusal = refused(ds.parse_ttl, value)
    assert refusal.reason == "invalid"
    assert str(refusal) == f"Stream-TTL {value!r} is not a whole number of seconds up to 2^53-1"


@pytest.mark.parametrize("value", [str(2**53), str(2**63), "9" * 5000])
def test_a_ttl_too_large_to_keep_is_a_bad_request(value: str) -> None:
    """A TTL past 2^53-1 seconds (no store column or JavaScript client holds it exactly; 5000
    digits are past what Python reads as an int) is refused as invalid, not a server error."""
    refusal = refused(ds.parse_ttl, value)
    assert refusal.reason == "invalid"
    assert str(refusal) == f"Stream-TTL {value!r} is not a whole number of seconds up to 2^53-1"


def test_a_fork_without_a_sub_offset_starts_at_the_message_boundary() -> None:
    assert ds.parse_sub_offset(None) == 0


@given(number=st.integers(min_value=0, max_value=ds.MAX_SAFE))
def test_a_sub_offset_in_plain_decimal_is_that_number(number: int) -> None:
    assert ds.parse_sub_offset(str(number)) == number
    assert ds.parse_sub_offset(f" {number} ") == number  # header whitespace is not part of the value


@pytest.mark.parametrize("value", ["-1", "+3", "03", "1.5", "", "x", str(2**53), str(2**63), "9" * 5000])
def test_any_other_sub_offset_is_refused_naming_it(value: str) -> None:
    """Past 2^53-1 it addresses no message and fits no store column: a bad request, not a server error."""
    refusal = refused(ds.parse_sub_offset, value)
    assert refusal.reason == "invalid"
    assert str(refusal) == f"Stream-Fork-Sub-Offset {value!r} is not a whole number up to 2^53-1"


def test_no_expiry_header_is_no_expiry() -> None:
    """A stream created without ``Stream-Expires-At`` has no absolute expiry."""
    assert ds.parse_expires_at(None) is None


@pytest.mark.parametrize(("value", "moment"), [
    ("2026-01-01T00:00:00Z", datetime(2026, 1, 1, tzinfo=timezone.utc)),
    ("2026-01-01t00:00:00z", datetime(2026, 1, 1, tzinfo=timezone.utc)),
    ("2026-01-01 00:00:00Z", datetime(2026, 1, 1, tzinfo=timezone.utc)),
    ("  2026-01-01T00:00:00Z ", datetime(2026, 1, 1, tzinfo=timezone.utc)),
    ("2026-01-01T01:00:00+01:00", datetime(2026, 1, 1, tzinfo=timezone.utc)),
    ("2025-12-31T19:30:00-04:30", datetime(2026, 1, 1, tzinfo=timezone.utc)),
    ("2026-06-30T12:34:56.25Z", datetime(2026, 6, 30, 12, 34, 56, 250000, tzinfo=timezone.utc)),
])
def test_an_rfc3339_expiry_is_the_moment_it_names(value: str, moment: datetime) -> None:
    """Any RFC 3339 form (``T`` or space, either case, any offset, fractions) is read as the
    instant it names."""
    assert ds.parse_expires_at(value) == moment.timestamp()


@pytest.mark.parametrize("value", [
    "tomorrow", "2026-01-01", "2026-01-01T00:00:00", "2026-01-01T00:00Z", "1767225600",
    "2026-01-01T00:00:00+0100", "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00Z trailing",
])
def test_an_expiry_that_is_not_rfc3339_is_refused(value: str) -> None:
    """A date alone, a time without its offset, a Unix time: a bad request that names the value."""
    refusal = refused(ds.parse_expires_at, value)
    assert refusal.reason == "invalid"
    assert str(refusal) == f"Stream-Expires-At {value!r} is not an RFC 3339 time"


@pytest.mark.parametrize("value", [
    "2026-02-30T00:00:00Z", "2026-13-01T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T00:60:00Z",
    "2026-01-01T00:00:00+24:00",
])
def test_an_expiry_of_the_right_shape_but_no_real_time_is_refused(value: str) -> None:
    """The 30th of February, the 13th month, hour 24: refused as invalid, not a server error."""
    refusal = refused(ds.parse_expires_at, value)
    assert refusal.reason == "invalid"
    assert str(refusal) == f"Stream-Expires-At {value!r} is not a valid time"


def test_a_stream_without_ttl_or_expiry_never_expires() -> None:
    """With neither, a stream lives until it is deleted."""
    assert not state().expired(10.0**12)


def test_a_stream_expires_at_its_expiry_time() -> None:
    """``Stream-Expires-At``: live before the instant, gone from it on."""
    stream = state(expires_epoch=5000.0)
    assert not stream.expired(4999.5)
    assert stream.expired(5000.0)
    assert stream.expired(5001.0)


def test_a_stream_expires_its_ttl_after_it_was_last_touched() -> None:
    """``Stream-TTL``: live for that many seconds after the stream was last touched."""
    stream = state(ttl=60, touched_at=1000.0)
    assert not stream.expired(1059.9)
    assert stream.expired(1060.0)
    assert stream.expired(2000.0)
    assert not state(ttl=60, touched_at=2000.0).expired(2059.0)


def test_a_ttl_of_zero_is_expired_at_once() -> None:
    """``Stream-TTL: 0`` is a valid TTL: the stream is gone as soon as it is made."""
    assert state(ttl=0, touched_at=1000.0).expired(1000.0)


def test_whichever_of_ttl_and_expiry_comes_first_ends_the_stream() -> None:
    """A fork may carry both (its own TTL, its source's expiry): the earlier one counts."""
    assert state(ttl=60, touched_at=1000.0, expires_epoch=1030.0).expired(1030.0)
    assert state(ttl=10, touched_at=1000.0, expires_epoch=5000.0).expired(1010.0)
    assert not state(ttl=60, touched_at=1000.0, expires_epoch=5000.0).expired(1059.0)


# -- idempotent producers (protocol §5.2.1) ------------------------------------------------------


def test_no_producer_headers_is_no_producer() -> None:
    """An append without the three headers is a plain append."""
    assert ds.parse_producer(None, None, None) is None


def test_the_three_producer_headers_make_a_producer() -> None:
    """Id, epoch and seq as sent; the epoch and seq as integers up to 2^53-1."""
    assert ds.parse_producer("order-service-1", "3", "17") == ds.Producer("order-service-1", 3, 17)
    assert ds.parse_producer("p", "0", "0") == ds.Producer("p", 0, 0)
    assert ds.parse_producer("p", str(2**53 - 1), str(2**53 - 1)) == ds.Producer("p", 2**53 - 1, 2**53 - 1)
    assert ds.parse_producer(" p ", " 2 ", " 5 ") == ds.Producer(" p ", 2, 5)


@pytest.mark.parametrize(("pid", "epoch", "seq"), [
    ("p", None, None), (None, "0", None), (None, None, "0"), ("p", "0", None), ("p", None, "0"), (None, "0", "0"),
])
def test_producer_headers_come_all_three_or_none(pid: str | None, epoch: str | None, seq: str | None) -> None:
    """Some but not all of the three is a bad request."""
    refusal = refused(ds.parse_producer, pid, epoch, seq)
    assert refusal.reason == "invalid"
    assert str(refusal) == "Producer-Id, Producer-Epoch and Producer-Seq go together"


@pytest.mark.parametrize("pid", ["", "  ", "\t"])
def test_an_empty_producer_id_is_refused(pid: str) -> None:
    """``Producer-Id`` must be a non-empty string."""
    refusal = refused(ds.parse_producer, pid, "0", "0")
    assert refusal.reason == "invalid"
    assert str(refusal) == "Producer-Id is empty"


@pytest.mark.parametrize("bad", ["-1", "+1", "1.0", "1e3", "abc", "", "01", str(2**53), str(10**30), "0x1", "9" * 5000])
def test_an_epoch_or_seq_that_is_not_a_safe_integer_is_refused_by_name(bad: str) -> None:
    """Epoch and seq are integers from 0 to 2^53-1 in plain decimal; the refusal names the header."""
    for name, args in (("Producer-Epoch", ("p", bad, "0")), ("Producer-Seq", ("p", "0", bad))):
        refusal = refused(ds.parse_producer, *args)
        assert refusal.reason == "invalid"
        assert str(refusal) == f"{name} {bad!r} is not an integer from 0 to 2^53-1"


@given(first=st.tuples(st.text(max_size=4), st.integers(0, 3), st.integers(0, 3)),
       second=st.tuples(st.text(max_size=4), st.integers(0, 3), st.integers(0, 3)))
def test_a_producer_key_tells_producers_apart(first: tuple[str, int, int], second: tuple[str, int, int]) -> None:
    """The key a close is remembered by is the same for the same (id, epoch, seq) and only then,
    whatever the id holds (colons included)."""
    a, b = ds.Producer(*first), ds.Producer(*second)
    assert (a.key() == b.key()) == (a == b)


def test_a_producer_key_is_epoch_seq_and_id() -> None:
    """The stored form (a close's ``closed_by`` survives restarts in it)."""
    assert ds.Producer("p:1", 2, 3).key() == "2:3:p:1"


def test_a_new_producer_starts_at_seq_zero_in_any_epoch() -> None:
    """A producer the stream has not seen is accepted at seq 0, whatever its epoch."""
    assert ds.check_producer(ds.Producer("p", 0, 0), None) == "accept"
    assert ds.check_producer(ds.Producer("p", 6, 0), None) == "accept"


def test_a_new_producer_past_seq_zero_is_told_to_start_at_zero() -> None:
    """A gap before the first batch: a conflict that says seq 0 is expected and what came."""
    refusal = refused(ds.check_producer, ds.Producer("p", 0, 4), None)
    assert (refusal.reason, refusal.expected_seq, refusal.received_seq) == ("conflict", 0, 4)
    assert str(refusal) == "a new producer starts at seq 0, not 4"


def test_a_stale_epoch_is_fenced_and_told_the_current_one() -> None:
    """A zombie of an older epoch is refused (403) with the current epoch, whatever its seq."""
    for seq in (0, 3, 9):
        refusal = refused(ds.check_producer, ds.Producer("p", 1, seq), (2, 5))
        assert (refusal.reason, refusal.epoch) == ("stale_epoch", 2)
        assert refusal.expected_seq is None and refusal.received_seq is None
        assert str(refusal) == "producer epoch 1 is stale; the current one is 2"


def test_a_new_epoch_starts_at_seq_zero() -> None:
    """A restarted producer (a higher epoch) is accepted at seq 0 and refused (400) past it."""
    assert ds.check_producer(ds.Producer("p", 3, 0), (2, 5)) == "accept"
    refusal = refused(ds.check_producer, ds.Producer("p", 3, 6), (2, 5))
    assert refusal.reason == "invalid"
    assert str(refusal) == "a new epoch starts at seq 0, not 6"


def test_within_an_epoch_a_seen_seq_is_a_duplicate_the_next_accepted_and_a_gap_refused() -> None:
    """The protocol's table: ``seq <= last`` duplicate, ``last + 1`` accept, beyond a gap (409
    with the expected and received seqs)."""
    assert ds.check_producer(ds.Producer("p", 2, 0), (2, 5)) == "duplicate"
    assert ds.check_producer(ds.Producer("p", 2, 5), (2, 5)) == "duplicate"
    assert ds.check_producer(ds.Producer("p", 2, 6), (2, 5)) == "accept"
    refusal = refused(ds.check_producer, ds.Producer("p", 2, 7), (2, 5))
    assert (refusal.reason, refusal.expected_seq, refusal.received_seq) == ("conflict", 6, 7)
    assert str(refusal) == "producer seq 7 leaves a gap after 5"


@given(epoch=st.integers(0, 5), last=st.integers(0, 50), sent=st.tuples(st.integers(0, 5), st.integers(0, 60)))
def test_the_producer_verdict_follows_the_protocols_validation_table(
        epoch: int, last: int, sent: tuple[int, int]) -> None:
    """For any stored (epoch, last seq) and any (epoch, seq) sent, the verdict is the table's."""
    producer = ds.Producer("p", *sent)
    try:
        verdict: str = ds.check_producer(producer, (epoch, last))
    except DsRefusal as refusal:
        verdict = refusal.reason
    if producer.epoch < epoch:
        assert verdict == "stale_epoch"
    elif producer.epoch > epoch:
        assert verdict == ("accept" if producer.seq == 0 else "invalid")
    elif producer.seq <= last:
        assert verdict == "duplicate"
    else:
        assert verdict == ("accept" if producer.seq == last + 1 else "conflict")


@given(retries=st.lists(st.integers(0, 3), min_size=1, max_size=12))
def test_a_producer_retrying_its_batches_has_each_accepted_exactly_once(retries: list[int]) -> None:
    """A producer that sends batches 0, 1, 2, … and resends each a few times (lost answers)
    has every batch accepted once and every resend taken as a duplicate."""
    stored: tuple[int, int] | None = None
    accepted: list[int] = []
    for seq, times in enumerate(retries):
        for _ in range(times + 1):
            if ds.check_producer(ds.Producer("p", 0, seq), stored) == "accept":
                accepted.append(seq)
                stored = (0, seq)
    assert accepted == list(range(len(retries)))


# -- JSON mode (protocol §7.1) -------------------------------------------------------------------


@pytest.mark.parametrize(("body", "messages"), [
    (b'{"event": "created"}', [b'{"event": "created"}']),
    (b'[{"event": "a"}, {"event": "b"}]', [b'{"event": "a"}', b'{"event": "b"}']),
    (b"[[1,2], [3,4]]", [b"[1,2]", b"[3,4]"]),
    (b"[[[1,2,3]]]", [b"[[1,2,3]]"]),
    (b"[]", []),
    (b" [ \n ] ", []),
    (b'\t[ 1 ,\r\n"two" , {"t" : [ ]} ]\n', [b"1", b'"two"', b'{"t" : [ ]}']),
    (b' "text" ', [b'"text"']),
    (b"null", [b"null"]),
    (b"12345678901234567890", [b"12345678901234567890"]),
    ('["é", "\\u00e9"]'.encode(), ['"é"'.encode(), b'"\\u00e9"']),
])
def test_a_json_body_is_its_messages_as_written_with_an_array_flattened_once(
        body: bytes, messages: list[bytes]) -> None:
    """The protocol's own examples: one value is one message, an array's elements are the
    messages (one level only), each kept byte for byte."""
    assert ds.json_messages(body) == messages


@pytest.mark.parametrize("body", [
    b"", b"   ", b"{", b"[", b"[1,]", b"[,1]", b"[1 2]", b"[1,,2]", b"[1}", b"1 2", b"[1]x", b"[]x", b"[ ]x",
    b"[1] [2]", b"{}{}", b"NaN", b"[Infinity]", b"-Infinity", b"\xff\xfe", b"[\"\xc3\"]", b"\xc2\xa0[1]", b"[" * 100_000, b"{'a': 1}",
])
def test_a_body_that_is_not_json_is_refused(body: bytes) -> None:
    """Not JSON (nor UTF-8), trailing data, NaN and Infinity, nesting too deep: a bad request."""
    refusal = refused(ds.json_messages, body)
    assert refusal.reason == "invalid"
    assert str(refusal).startswith("the body is not JSON: ")


def test_the_refusal_says_what_is_wrong_with_the_json() -> None:
    """The detail carries the parser's reason, so the writer can find the mistake."""
    assert str(refused(ds.json_messages, b"[1 2]")) == "the body is not JSON: expected , or ]"
    assert str(refused(ds.json_messages, b"[1] 2")) == "the body is not JSON: extra data after the value"
    assert str(refused(ds.json_messages, b"[NaN]")) == "the body is not JSON: NaN is not JSON"


@given(values=st.lists(json_values, max_size=6), spaced=st.booleans())
def test_an_array_of_any_json_values_is_those_values(values: list[Any], spaced: bool) -> None:
    """Whatever the values, each element comes back as its own message, and a read's JSON body
    of them is the array again."""
    body = json.dumps(values, indent=1 if spaced else None).encode()
    messages = ds.json_messages(body)
    assert [json.loads(message) for message in messages] == values
    assert json.loads(ds.body_of(messages, "application/json")) == values


@given(value=json_values.filter(lambda value: not isinstance(value, list)))
def test_any_other_json_value_is_one_message(value: Any) -> None:
    """A value that is not an array is stored as one message, as written."""
    body = json.dumps(value).encode()
    assert ds.json_messages(body) == [body]


def test_an_array_of_more_messages_than_the_limit_is_too_large() -> None:
    """Up to the limit is fine; one more is refused (413), with the limit in the problem."""
    assert ds.json_messages(b"[1,2,3]", limit=3) == [b"1", b"2", b"3"]
    assert ds.json_messages(b"[]", limit=0) == []
    refusal = refused(ds.json_messages, b"[1,2,3]", limit=2)
    assert refusal.reason == "too_large"
    assert refusal.extra == {"limit": 2}
    assert str(refusal) == "a JSON append holds at most 2 messages (LASTWORD_DS_MAX_JSON_MESSAGES)"


def test_the_limit_is_held_before_the_rest_of_the_body_is_read() -> None:
    """A body of many tiny messages is refused as too large as soon as it passes the limit,
    whatever follows (it is not parsed to its end first)."""
    assert refused(ds.json_messages, b"[0,0,0,0," + b"?" * 10, limit=3).reason == "too_large"


def test_split_json_answers_the_messages_or_the_refusal() -> None:
    """Done before the transaction: the refusal is handed back, to be raised where the parse stood."""
    assert ds.split_json(b"[1, 2]", 5) == [b"1", b"2"]
    invalid = ds.split_json(b"[1,", 5)
    assert isinstance(invalid, DsRefusal) and invalid.reason == "invalid"
    too_many = ds.split_json(b"[1,2,3]", 2)
    assert isinstance(too_many, DsRefusal) and too_many.reason == "too_large"


# -- read bodies and SSE data (protocol §5.5, §5.7, §7.1) ----------------------------------------


def test_a_json_read_is_an_array_of_its_messages() -> None:
    """A JSON stream's read is one JSON array of the messages in range, ``[]`` when none."""
    assert ds.body_of([b'{"a":1}', b"2"], "application/json") == b'[{"a":1},2]'
    assert ds.body_of([b"2"], "Application/JSON; charset=utf-8") == b"[2]"
    assert ds.body_of([], "application/json") == b"[]"


def test_any_other_read_is_the_bytes_back_to_back() -> None:
    """A byte stream's read is its appends concatenated, nothing between them; empty when none."""
    assert ds.body_of([b"ab", b"", b"c\n"], "text/plain") == b"abc\n"
    assert ds.body_of([b"\x00\xff", b"\x01"], "application/octet-stream") == b"\x00\xff\x01"
    assert ds.body_of([], "text/plain") == b""


def test_sse_data_is_text_for_text_and_json_streams() -> None:
    """A ``text/*`` stream's SSE data is its text; a JSON stream's, the array of its messages."""
    assert ds.sse_data([b"hello ", "wörld".encode()], "text/plain; charset=utf-8") == "hello wörld"
    assert ds.sse_data([b"1", b'"x"'], "application/json") == '[1,"x"]'
    assert ds.sse_data([b"ok\xff"], "text/plain") == "ok\ufffd"


def test_sse_data_is_base64_for_a_binary_stream() -> None:
    """Any other stream's bytes go base64-encoded, all of them in one piece."""
    entries = [b"\x00\xff", b"\x01\x02\x03"]
    data = ds.sse_data(entries, "application/octet-stream")
    assert data == "AP8BAgM="
    assert base64.b64decode(data) == b"".join(entries)


# -- cursors (protocol §8.1) ---------------------------------------------------------------------


def test_the_cursor_counts_twenty_second_intervals_since_the_protocols_epoch() -> None:
    """Without a cursor from the client, the cursor is the current interval: 20 s each since
    2024-10-09T00:00:00Z."""
    epoch = datetime(2024, 10, 9, tzinfo=timezone.utc).timestamp()
    assert ds.cursor(epoch, None, 1) == "0"
    assert ds.cursor(epoch + 19.9, None, 1) == "0"
    assert ds.cursor(epoch + 20, None, 1) == "1"
    assert ds.cursor(epoch + 20 * 1000 + 5, None, 1) == "1000"


def test_every_interval_is_twenty_seconds_wide_on_either_side_of_the_epoch() -> None:
    """Intervals are counted down as well as up: a clock just before the epoch is in the
    interval before it, not in a double-width interval 0."""
    assert ds.cursor(ds.CURSOR_EPOCH - 0.5, None, 1) == "-1"
    assert ds.cursor(ds.CURSOR_EPOCH - 20, None, 1) == "-1"
    assert ds.cursor(ds.CURSOR_EPOCH - 20.5, None, 1) == "-2"


def test_a_client_cursor_behind_the_interval_gets_the_interval() -> None:
    """An older cursor is simply passed: the answer is the current interval."""
    now = ds.CURSOR_EPOCH + 20 * 1000
    assert ds.cursor(now, "999", 3600) == "1000"
    assert ds.cursor(now, "0", 3600) == "1000"


def test_a_client_cursor_at_or_past_the_interval_is_moved_on_by_the_jitter() -> None:
    """The same interval again (a cached answer coming back round) or a later one: the cursor
    moves past the client's by the jitter in whole intervals, at least one."""
    now = ds.CURSOR_EPOCH + 20 * 1000
    assert ds.cursor(now, "1000", 1) == "1001"
    assert ds.cursor(now, "1000", 39) == "1001"
    assert ds.cursor(now, "1000", 40) == "1002"
    assert ds.cursor(now, "1000", 1000) == "1050"
    assert ds.cursor(now, "1000", 3600) == "1180"
    assert ds.cursor(now, "5000", 20) == "5001"


@pytest.mark.parametrize("theirs", ["", "abc", "-5", "01000", "1e3", "1000 ", "+1000"])
def test_a_cursor_that_is_not_a_decimal_number_is_ignored(theirs: str) -> None:
    """The client echoes what it was given; anything else counts as no cursor."""
    now = ds.CURSOR_EPOCH + 20 * 1000
    assert ds.cursor(now, theirs, 3600) == "1000"


@pytest.mark.parametrize("theirs", [str(2**53), "9" * 5000])
def test_a_cursor_no_server_hands_out_is_ignored_however_long(theirs: str) -> None:
    """A number past 2^53-1 is no cursor of ours (ours grow by at most 180 a request from the
    interval): it counts as none, and thousands of digits are no server error either."""
    now = ds.CURSOR_EPOCH + 20 * 1000
    assert ds.cursor(now, theirs, 3600) == "1000"


@given(elapsed=st.floats(0, 10**9), theirs=st.integers(0, 10**12), jitter=st.integers(1, 3600))
def test_a_cursor_is_past_the_clients_and_never_behind_the_interval(elapsed: float, theirs: int, jitter: int) -> None:
    """Whatever the client echoes, the new cursor is strictly greater than it, and never less
    than the current interval (protocol §8.1, "cursors never go backwards")."""
    now = ds.CURSOR_EPOCH + elapsed
    answer = ds.cursor(now, str(theirs), jitter)
    assert answer.isdigit()
    assert int(answer) > theirs
    assert int(answer) >= int(ds.cursor(now, None, jitter))


@given(steps=st.lists(st.tuples(st.floats(0, 100), st.integers(1, 3600)), min_size=1, max_size=20))
def test_a_client_echoing_its_cursor_sees_it_only_grow(steps: list[tuple[float, int]]) -> None:
    """A long-poll loop that echoes each cursor, at any pace, never sees one repeat or go back."""
    now, seen = float(ds.CURSOR_EPOCH), None
    answers = []
    for pause, jitter in steps:
        now += pause
        seen = ds.cursor(now, seen, jitter)
        answers.append(int(seen))
    assert answers == sorted(set(answers))


# -- ETags (protocol §5.5, §8.1) -----------------------------------------------------------------


def test_an_etag_is_the_stream_and_the_range_it_covers() -> None:
    """``"{stream id}:{start offset}:{end offset}"``, quoted, and ``:c`` once the stream is closed."""
    assert ds.etag("u1", 0, 3, False) == f'"u1:{ds.offset(0)}:{ds.offset(3)}"'
    assert ds.etag("u1", 0, 3, True) == f'"u1:{ds.offset(0)}:{ds.offset(3)}:c"'


@given(first=st.tuples(st.sampled_from(["u1", "u2"]), positions, positions, st.booleans()),
       second=st.tuples(st.sampled_from(["u1", "u2"]), positions, positions, st.booleans()))
def test_an_etag_changes_with_the_stream_the_range_and_the_closing(
        first: tuple[str, int, int, bool], second: tuple[str, int, int, bool]) -> None:
    """Two answers share an ETag only when they are of the same stream, range and closed state,
    so a 304 never hides new data or the end of a stream."""
    assert (ds.etag(*first) == ds.etag(*second)) == (first == second)


# -- what a read reports (protocol §5.5) ---------------------------------------------------------


def test_a_read_ends_after_the_entries_it_found() -> None:
    """The next offset is the start plus the entries read, or the position the store says."""
    assert ds.Slice(state(tail=9), start=4, entries=[b"a", b"b"]).end == 6
    assert ds.Slice(state(tail=9), start=4, entries=[]).end == 4
    assert ds.Slice(state(tail=9), start=4, entries=[b"a"], last=8).end == 8
    assert ds.Slice(state(tail=9), start=4, entries=[b"a"], last=0).end == 0


def test_a_read_is_up_to_date_when_it_reaches_the_tail() -> None:
    """``Stream-Up-To-Date`` when the read reached the tail, not when more is left."""
    assert ds.Slice(state(tail=6), start=4, entries=[b"a", b"b"]).up_to_date
    assert not ds.Slice(state(tail=7), start=4, entries=[b"a", b"b"]).up_to_date
    assert ds.Slice(state(tail=6), start=6, entries=[]).up_to_date
    assert ds.Slice(state(tail=3), start=0, entries=[], last=5).up_to_date
    assert not ds.Slice(state(tail=6), start=0, entries=[b"a"] * 6, last=5).up_to_date
