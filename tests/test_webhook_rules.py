"""The webhook rules that need no server: allowed hosts, internal addresses, secrets, backoff."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import orjson

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lastword.errors import InvalidWebhook, RunExists
from lastword.rules.records import RunRecord, RunSpec
from lastword.rules.runstate import repeated_create, secret_digest
from lastword.rules.webhook_payload import payload, webhook_id
from lastword.webhooks.rules import (
    MAX_RETRY_DELAY_SECONDS,
    allowed_host_patterns,
    check_webhook,
    host_allowed,
    retry_delay,
)


def test_allowed_hosts_match_exactly_or_by_suffix() -> None:
    """'a.example' matches itself only; '*.example' matches its subdomains, not the bare name."""
    patterns = allowed_host_patterns(" hooks.example , *.corp.internal ")
    assert host_allowed("hooks.example", patterns) and host_allowed("HOOKS.example.", patterns)
    assert host_allowed("a.b.corp.internal", patterns)
    assert not host_allowed("corp.internal", patterns)
    assert not host_allowed("evilhooks.example", patterns) and not host_allowed("xcorp.internal", patterns)
    assert allowed_host_patterns("") == () and allowed_host_patterns("a, *") == ()
    assert host_allowed("anything.at.all", ())


@pytest.mark.parametrize("secret", ["whsec_", "whsec_%%%", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_YQ=x"])
def test_secrets_must_be_standard_webhooks_secrets(secret: str) -> None:
    with pytest.raises(InvalidWebhook):
        check_webhook("https://h.example/x", secret, ())


@pytest.mark.parametrize("secret", [
    "whsec_" + "QUFB" * 8,  # 24 bytes: no padding
    "whsec_" + "QUFB" * 10 + "QUE=",  # 32 bytes, padded as base64 pads it
    "whsec_" + "QUFB" * 10 + "QUE",  # the same, its padding left off
    "whsec_" + "QUFB" * 21 + "QQ==",  # 64 bytes, padded
    "whsec_" + "QUFB" * 21 + "QQ",
])
def test_standard_secrets_are_accepted_padded_or_not(secret: str) -> None:
    """Secrets as Standard Webhooks libraries make them (24 to 64 bytes, '=' padding or none) pass."""
    check_webhook("https://h.example/x", secret, ())


@pytest.mark.parametrize("secret", ["whsec_QUE===", "whsec_QUE=QUE=", "whsec_Q", "whsec_===="])
def test_broken_padding_is_refused(secret: str) -> None:
    """Too much padding, padding inside, a lone base64 character, or only padding: refused."""
    with pytest.raises(InvalidWebhook):
        check_webhook("https://h.example/x", secret, ())


@given(attempts=st.integers(min_value=1, max_value=10_000), base=st.floats(min_value=0.001, max_value=100))
def test_backoff_doubles_with_jitter_and_is_capped(attempts: int, base: float) -> None:
    """Each delay is the doubled base within ±50 %, and never past the cap (with its jitter)."""
    delay = retry_delay(attempts, base, random.Random(attempts))
    doubled = min(base * 2.0 ** min(attempts - 1, 64), MAX_RETRY_DELAY_SECONDS)
    assert 0.5 * doubled <= delay <= 1.5 * doubled


#: Internal targets in the spellings a resolver accepts, with the reason the refusal names.
INTERNAL_SPELLINGS = [
    ("http://127.0.0.1/", "loopback"),
    ("http://127.1/", "loopback"),
    ("http://2130706433/", "loopback"),
    ("http://0177.0.0.1/", "loopback"),
    ("http://0x7f.1/", "loopback"),
    ("http://0x7f000001:8080/hook", "loopback"),
    ("http://localhost/", "loopback"),
    ("http://localhost./", "loopback"),
    ("http://LocalHost:9000/", "loopback"),
    ("http://hooks.localhost/", "loopback"),
    ("http://[::1]/", "loopback"),
    ("http://[0:0:0:0:0:0:0:1]/", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://[::ffff:7f00:1]/", "loopback"),
    ("http://[::127.0.0.1]/", "loopback"),
    ("http://[2002:7f00:1::1]/", "loopback"),
    ("http://[64:ff9b::7f00:1]/", "loopback"),
    ("http://%31%32%37.0.0.1/", "loopback"),
    ("http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/", "loopback"),
    ("http://10.0.0.1/", "private"),
    ("http://172.16.5.4/", "private"),
    ("http://192.168.1.1/", "private"),
    ("http://[fd00::1]/", "private"),
    ("http://[::ffff:10.1.2.3]/", "private"),
    ("http://169.254.169.254/latest/meta-data", "link-local"),
    ("http://[fe80::1%25eth0]/", "link-local"),
    ("http://[::ffff:169.254.169.254]/", "link-local"),
    ("http://224.0.0.1/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://[ff0e::1]/", "multicast"),
    ("http://0.0.0.0/", "unspecified"),
    ("http://0/", "unspecified"),
    ("http://[::]/", "unspecified"),
    ("http://100.64.0.1/", "non-global"),
    ("http://192.0.2.1/", "non-global"),
    ("http://255.255.255.255/", "non-global"),
]


@pytest.mark.parametrize("url, reason", INTERNAL_SPELLINGS)
def test_internal_targets_are_refused_in_every_spelling(url: str, reason: str) -> None:
    """A host that is an internal address however it is written is 422, naming what it is."""
    with pytest.raises(InvalidWebhook) as refused:
        check_webhook(url, None, ())
    assert reason in refused.value.detail and "LASTWORD_WEBHOOK_ALLOW_PRIVATE" in refused.value.detail
    assert refused.value.extra["field"] == "webhook.url"


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/hook", "http://[::1]/", "http://localhost./", "http://10.0.0.1/"])
def test_allow_private_lifts_the_address_check_but_not_the_allow_list(url: str) -> None:
    """With LASTWORD_WEBHOOK_ALLOW_PRIVATE internal targets pass; the allow-list still applies."""
    check_webhook(url, None, (), allow_private=True)
    with pytest.raises(InvalidWebhook, match="ALLOWED_HOSTS"):
        check_webhook(url, None, ("hooks.example",), allow_private=True)


@pytest.mark.parametrize("url", ["https://hooks.example/x", "http://93.184.216.34/", "http://[2606:4700::1111]/",
                                 "http://1.1.1.1:8443/hook", "https://127.0.0.1.hooks.example/"])
def test_global_targets_and_names_pass_the_static_check(url: str) -> None:
    """Global literal addresses pass; a name is left to its resolution (checked at creation and delivery)."""
    check_webhook(url, None, ())


@given(address=st.one_of(
    st.ip_addresses(v=4).filter(lambda ip: not ip.is_global or ip.is_multicast),
    st.ip_addresses(v=6).filter(lambda ip: ip.is_loopback or ip.is_private or ip.is_link_local
                                or ip.is_multicast or ip.is_unspecified)),
    form=st.sampled_from(["dotted", "decimal", "hex", "octal", "mapped"]))
def test_no_spelling_of_an_internal_address_is_accepted(address: Any, form: str) -> None:
    """Internal addresses written as dotted, decimal, hex, octal or IPv4-mapped are all refused."""
    value = int(address)
    if address.version == 6:
        host = f"[{address}]"
    elif form == "decimal":
        host = str(value)
    elif form == "hex":
        host = hex(value)
    elif form == "octal":
        host = ".".join("0" + format(int(part), "o") for part in str(address).split("."))
    elif form == "mapped":
        host = f"[::ffff:{address}]"
    else:
        host = str(address)
    with pytest.raises(InvalidWebhook):
        check_webhook(f"http://{host}/hook", None, ())


def test_a_spec_stored_with_its_secret_still_matches_the_same_create() -> None:
    """Runs stored before secrets were digested compare equal to the same create made now, not to another."""
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    def canonical(value: str) -> str:
        return orjson.dumps({"runId": "old", "webhook": {"secret": value, "url": "https://h.example/"}},
                            option=orjson.OPT_SORT_KEYS).decode()

    existing = RunRecord(pk=1, run_id="old", parent_run_id=None, agent=None, mode="oneshot", metadata={},
                         lease_seconds=0, canonical=canonical(secret), status="running", turn=1, last_seq=1,
                         lease_expires_at=None, created_at=0, updated_at=0)
    spec = RunSpec(run_id="old", parent_run_id=None, agent=None, mode="oneshot", metadata={}, lease_seconds=None,
                   canonical=canonical(secret_digest(secret)))
    assert repeated_create(existing, spec) is existing
    with pytest.raises(RunExists):
        repeated_create(existing, dataclasses.replace(spec, canonical=canonical(secret_digest(secret + "x"))))


def test_the_delivery_id_names_the_run_and_turn() -> None:
    """One id per turn's end, the same on every retry: Standard Webhooks receivers dedupe by it."""
    assert webhook_id("r_1", 3) == "msg_r_1_3"
    assert webhook_id("r_1", 3) != webhook_id("r_1", 4) != webhook_id("r_2", 3)


def test_the_payload_is_the_end_event_with_its_type_and_time() -> None:
    """The body is {type, timestamp, data}: data is the subagent/end as the stream serves it,
    timestamp its endedAt, as compact JSON bytes stored once and resent unchanged."""
    end = {"runId": "r_1", "turn": 2, "endedAt": "2026-12-01T22:00:00.000Z", "output": "é"}
    body = payload(end)
    assert orjson.loads(body) == {"type": "subagent.end", "timestamp": "2026-12-01T22:00:00.000Z", "data": end}
    assert body == orjson.dumps(orjson.loads(body)).decode() and body == payload(dict(end))
