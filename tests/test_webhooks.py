"""Webhooks (SPEC §14) through a real server and a real receiver on loopback, on both backends."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import psycopg.sql
import pytest
from lastword.webhooks import addresses
from standardwebhooks.webhooks import Webhook

from tests.clock import ManualClock
from tests.receiver import Answer, Receiver
from tests.servers import threaded_server

WAIT = 30.0


def new_secret() -> str:
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


def serve(make_settings: Any, **overrides: Any) -> Any:
    """A server whose webhooks may reach the receivers on loopback (LASTWORD_WEBHOOK_ALLOW_PRIVATE)."""
    values = {"webhook_backoff_seconds": 0.05, "webhook_timeout_seconds": 2.0, "webhook_allow_private": True,
              **overrides}
    return threaded_server(make_settings(**values))


def deliveries_when(http: httpx.Client, run_id: str, done: Any) -> list[dict[str, Any]]:
    """The run's deliveries once ``done(deliveries)`` holds (polled, bounded)."""
    for _ in range(int(WAIT / 0.02)):
        deliveries = http.get(f"/v1/runs/{run_id}/deliveries").json()["deliveries"]
        if done(deliveries):
            return list(deliveries)
        threading.Event().wait(0.02)
    raise AssertionError(f"deliveries never reached the expected state: {deliveries}")


def settled(deliveries: list[dict[str, Any]]) -> bool:
    return bool(deliveries) and all(d["state"] != "pending" for d in deliveries)


def end_with_partial_answer(http: httpx.Client, run_id: str) -> None:
    http.post(f"/v1/runs/{run_id}/events", json=[
        {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "partial answer"}],
                                                  "usage": {"inputTokens": 5, "outputTokens": 7}}},
        {"type": "assistant/message", "message": {"content": [], "usage": {"inputTokens": 1, "outputTokens": 9}}},
    ]).raise_for_status()
    http.post(f"/v1/runs/{run_id}/end", json={"stopReason": "max_tokens"}).raise_for_status()


def test_an_end_is_delivered_signed_as_standard_webhooks_verify_it(make_settings: Any, receiver: Receiver) -> None:
    """The subagent/end arrives once, with the selected output, and its signature verifies."""
    secret = new_secret()
    with serve(make_settings) as url, httpx.Client(base_url=url) as http:
        http.post("/v1/runs", json={"runId": "hooked", "agent": "writer",
                                    "webhook": {"url": receiver.url, "secret": secret}}).raise_for_status()
        end_with_partial_answer(http, "hooked")
        got = receiver.arrivals.get(timeout=WAIT)
        [delivery] = deliveries_when(http, "hooked", settled)
        logged = [e["event"] for e in http.get("/v1/runs/hooked/events").json()["events"]]
    body = Webhook(secret).verify(got.body, got.headers)
    [end] = [event for event in logged if event["type"] == "subagent/end"]
    assert body == {"type": "subagent.end", "timestamp": end["endedAt"], "data": end}
    assert body["data"]["lastAssistantMessage"] == [{"type": "text", "text": "partial answer"}]
    assert body["data"]["stopReason"] == "max_tokens"
    assert got.webhook_id == "msg_hooked_1"
    assert got.headers["webhook-timestamp"].isdigit()
    assert got.headers["content-type"] == "application/json"
    assert delivery["webhookId"] == "msg_hooked_1" and delivery["turn"] == 1
    assert delivery["state"] == "delivered" and delivery["lastStatus"] == 200
    [attempt] = delivery["attempts"]
    assert attempt["statusCode"] == 200 and attempt["durationMs"] >= 0 and "nextAttemptAt" not in delivery
    with pytest.raises(Exception):
        Webhook(new_secret()).verify(got.body, got.headers)  # another secret does not verify


@pytest.mark.parametrize("size", [24, 32, 64])
@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_secrets_in_the_standard_form_are_accepted_and_sign(make_settings: Any, receiver: Receiver, size: int,
                                                           padded: bool) -> None:
    """'whsec_' + base64 of 24 to 64 random bytes, with or without its '=' padding, is taken at
    creation, and the delivery signed with it verifies with the Standard Webhooks library."""
    encoded = base64.b64encode(os.urandom(size)).decode()
    secret = "whsec_" + (encoded if padded else encoded.rstrip("="))
    with serve(make_settings) as url, httpx.Client(base_url=url) as http:
        created = http.post("/v1/runs", json={"runId": "signed", "webhook": {"url": receiver.url, "secret": secret}})
        assert created.status_code == 201, created.text
        http.post("/v1/runs/signed/end", json={"stopReason": "completed"}).raise_for_status()
        got = receiver.arrivals.get(timeout=WAIT)
    assert Webhook(secret).verify(got.body, got.headers)["data"]["runId"] == "signed"


def test_failures_are_retried_under_one_webhook_id_until_a_2xx(make_settings: Any) -> None:
    """Two 503s then a 200: three attempts, one webhook-id, each re-signed, then delivered."""
    answers = iter([Answer(503, b"busy"), Answer(503, b"busy"), Answer(200)])
    receiver = Receiver(lambda _: next(answers))
    secret = new_secret()
    try:
        with serve(make_settings) as url, httpx.Client(base_url=url) as http:
            http.post("/v1/runs", json={"runId": "flaky", "webhook": {"url": receiver.url, "secret": secret}})
            http.post("/v1/runs/flaky/end", json={"stopReason": "end_turn"}).raise_for_status()
            [delivery] = deliveries_when(http, "flaky", settled)
    finally:
        receiver.close()
    assert receiver.ids() == ["msg_flaky_1"] * 3
    for request in receiver.requests:
        Webhook(secret).verify(request.body, request.headers)
    assert len({request.body for request in receiver.requests}) == 1  # the same payload every time
    assert delivery["state"] == "delivered"
    assert [a.get("statusCode") for a in delivery["attempts"]] == [503, 503, 200]
    assert delivery["attempts"][0]["response"] == "busy"


def test_a_delivery_that_never_succeeds_is_marked_failed_not_dropped(make_settings: Any) -> None:
    """With every answer a 500, it stops after the configured attempts as failed, each one listed."""
    receiver = Receiver(lambda _: Answer(500, b"x" * 100_000))
    try:
        with serve(make_settings, webhook_max_attempts=3) as url, httpx.Client(base_url=url) as http:
            http.post("/v1/runs", json={"runId": "doomed", "webhook": {"url": receiver.url}})
            http.post("/v1/runs/doomed/end", json={"stopReason": "cancelled"}).raise_for_status()
            [delivery] = deliveries_when(http, "doomed", settled)
            metrics = http.get("/metrics").text
    finally:
        receiver.close()
    assert delivery["state"] == "failed" and delivery["lastStatus"] == 500
    assert len(delivery["attempts"]) == 3 and "nextAttemptAt" not in delivery
    assert all(len(a["response"]) <= 200 for a in delivery["attempts"])  # an excerpt, not the body
    assert 'lastword_webhook_deliveries_total{outcome="failed"} 1.0' in metrics
    assert 'lastword_webhook_attempts_total{result="http_error"} 3.0' in metrics
    assert "lastword_webhook_outbox_pending 0.0" in metrics


def test_a_pending_retry_shows_when_it_is_due(make_settings: Any) -> None:
    """Between attempts the delivery is pending with nextAttemptAt, counted in the outbox gauges."""
    receiver = Receiver(lambda _: Answer(503))
    try:
        with serve(make_settings, webhook_backoff_seconds=3600) as url, httpx.Client(base_url=url) as http:
            http.post("/v1/runs", json={"runId": "later", "webhook": {"url": receiver.url}})
            http.post("/v1/runs/later/end", json={"stopReason": "end_turn"}).raise_for_status()
            [delivery] = deliveries_when(http, "later", lambda ds: ds and ds[0]["attempts"])
            metrics = http.get("/metrics").text
    finally:
        receiver.close()
    assert delivery["state"] == "pending" and "nextAttemptAt" in delivery
    assert "lastword_webhook_outbox_pending 1.0" in metrics


def test_redirects_are_not_followed(make_settings: Any) -> None:
    """A 307 to another host is an unsuccessful answer: the other host hears nothing."""
    elsewhere = Receiver()
    receiver = Receiver(lambda _: Answer(307, b"", {"location": elsewhere.url}))
    try:
        with serve(make_settings, webhook_max_attempts=2) as url, httpx.Client(base_url=url) as http:
            http.post("/v1/runs", json={"runId": "moved", "webhook": {"url": receiver.url}})
            http.post("/v1/runs/moved/end", json={"stopReason": "end_turn"}).raise_for_status()
            [delivery] = deliveries_when(http, "moved", settled)
    finally:
        receiver.close()
        elsewhere.close()
    assert elsewhere.requests == []
    assert delivery["state"] == "failed" and [a["statusCode"] for a in delivery["attempts"]] == [307, 307]


def test_a_silent_or_absent_receiver_is_an_attempt_with_an_error(make_settings: Any) -> None:
    """No answer within the time-out, or a refused connection, is recorded as the attempt's error."""
    release = threading.Event()
    slow = Receiver(lambda _: Answer(200, hold=release))
    try:
        with serve(make_settings, webhook_timeout_seconds=0.3, webhook_max_attempts=1) as url, \
                httpx.Client(base_url=url) as http:
            http.post("/v1/runs", json={"runId": "slow", "webhook": {"url": slow.url}})
            http.post("/v1/runs", json={"runId": "absent", "webhook": {"url": "http://127.0.0.1:9/hook"}})
            for run_id in ("slow", "absent"):
                http.post(f"/v1/runs/{run_id}/end", json={"stopReason": "end_turn"}).raise_for_status()
            [timed_out] = deliveries_when(http, "slow", settled)
            [refused] = deliveries_when(http, "absent", settled)
    finally:
        release.set()
        slow.close()
    assert "no answer within" in timed_out["attempts"][0]["error"]
    assert "statusCode" not in refused["attempts"][0] and refused["attempts"][0]["error"]


@pytest.mark.parametrize("webhook, field", [
    ({"url": "ftp://127.0.0.1/hook"}, "webhook.url"),
    ({"url": "file:///etc/passwd"}, "webhook.url"),
    ({"url": "http://evil.example/hook"}, "webhook.url"),
    ({"url": "http://user:pw@hooks.example/hook"}, "webhook.url"),
    ({"url": "http://hooks.example/hook", "secret": "not-a-secret"}, "webhook.secret"),
    ({"url": "http://hooks.example/hook", "secret": "whsec_!!!"}, "webhook.secret"),
])
def test_bad_webhooks_are_refused_and_create_nothing(make_settings: Any, webhook: dict[str, str], field: str) -> None:
    """A non-http(s) URL, a host outside the allowed list, or a malformed secret is 422; no run exists."""
    with serve(make_settings, webhook_allowed_hosts="hooks.example, *.internal") as url, \
            httpx.Client(base_url=url) as http:
        refused = http.post("/v1/runs", json={"runId": "nope", "webhook": webhook})
        assert http.get("/v1/runs/nope").status_code == 404
        allowed = http.post("/v1/runs", json={"runId": "fine", "webhook": {"url": "https://a.b.internal/x"}})
    assert refused.status_code == 422
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["code"] == "invalid_webhook" and refused.json()["field"] == field
    assert allowed.status_code == 201


def test_the_secret_never_comes_back(make_settings: Any, receiver: Receiver) -> None:
    """Neither the create answer, the run, the run list nor the deliveries show the secret."""
    secret = new_secret()
    with serve(make_settings) as url, httpx.Client(base_url=url) as http:
        created = http.post("/v1/runs", json={"runId": "quiet", "webhook": {"url": receiver.url, "secret": secret}})
        again = http.post("/v1/runs", json={"runId": "quiet", "webhook": {"url": receiver.url, "secret": secret}})
        http.post("/v1/runs/quiet/end", json={"stopReason": "end_turn"}).raise_for_status()
        deliveries_when(http, "quiet", settled)
        shown = [created.text, again.text, http.get("/v1/runs").text, http.get("/v1/runs/quiet").text,
                 http.get("/v1/runs/quiet/deliveries").text, http.get("/v1/runs/quiet/events").text]
    assert again.status_code == 200  # the same create is idempotent, secret and all
    secret_key = secret.removeprefix("whsec_")
    assert not any(secret_key in text for text in shown)


def test_runs_without_a_webhook_have_no_deliveries(make_settings: Any, receiver: Receiver) -> None:
    """No webhook: nothing is POSTed and the list is empty; an unknown run is a 404."""
    with serve(make_settings) as url, httpx.Client(base_url=url) as http:
        http.post("/v1/runs", json={"runId": "plain"}).raise_for_status()
        http.post("/v1/runs/plain/end", json={"stopReason": "end_turn"}).raise_for_status()
        listed = http.get("/v1/runs/plain/deliveries").json()
        unknown = http.get("/v1/runs/ghost/deliveries")
    assert listed == {"deliveries": []}
    assert unknown.status_code == 404 and unknown.json()["code"] == "run_not_found"
    assert receiver.requests == []


def test_every_turn_of_a_continuable_run_is_its_own_delivery(make_settings: Any, receiver: Receiver) -> None:
    """Each turn's end is delivered under its own webhook-id, in turn order."""
    with serve(make_settings) as url, httpx.Client(base_url=url) as http:
        http.post("/v1/runs", json={"runId": "chat", "mode": "continuable", "webhook": {"url": receiver.url}})
        http.post("/v1/runs/chat/end", json={"stopReason": "end_turn"}).raise_for_status()
        http.post("/v1/runs/chat/turns").raise_for_status()
        http.post("/v1/runs/chat/end", json={"stopReason": "cancelled"}).raise_for_status()
        deliveries = deliveries_when(http, "chat", lambda ds: len(ds) == 2 and settled(ds))
    assert [d["webhookId"] for d in deliveries] == ["msg_chat_1", "msg_chat_2"]
    bodies = {r.webhook_id: json.loads(r.body) for r in receiver.requests}
    assert bodies["msg_chat_2"]["data"]["stopReason"] == "cancelled"




@pytest.fixture
def hosts(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A hosts file for the webhook lookups: a name listed here resolves to its address; each
    lookup of a listed name is counted under ``"#name"``."""
    table: dict[str, str] = {}
    real = addresses.getaddrinfo

    def lookup(host: str, port: int, *args: Any, **kwargs: Any) -> Any:
        if host in table:
            table["#" + host] = str(int(table.get("#" + host, "0")) + 1)
            return real(table[host], port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(addresses, "getaddrinfo", lookup)
    return table


@pytest.mark.parametrize("url, reason", [
    ("http://2130706433/hook", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "loopback"),
    ("http://localhost./", "loopback"),
    ("http://169.254.169.254/latest/meta-data", "link-local"),
    ("http://10.0.0.1/", "private"),
    ("http://[fe80::1%25eth0]/", "link-local"),
])
def test_internal_targets_are_refused_at_creation(make_settings: Any, url: str, reason: str) -> None:
    """By default a webhook aimed inside is 422 invalid_webhook naming why, and no run exists."""
    with serve(make_settings, webhook_allow_private=False) as base, httpx.Client(base_url=base) as http:
        refused = http.post("/v1/runs", json={"runId": "inside", "webhook": {"url": url}})
        assert http.get("/v1/runs/inside").status_code == 404
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_webhook"
    assert reason in refused.json()["detail"] and refused.json()["field"] == "webhook.url"


@pytest.mark.parametrize("url", ["http://[::1/", "http://[zz]/", "http://127.0.0.1:80:80/", "http://h.example:http/",
                                 "http://[::1]x/", "http://xn--zz.example/", "http://xn--ls8h.example/"])
def test_malformed_webhook_urls_are_422_not_500(make_settings: Any, url: str) -> None:
    """A URL that cannot be parsed is refused as invalid_webhook, allowed private targets or not."""
    with serve(make_settings) as base, httpx.Client(base_url=base) as http:
        refused = http.post("/v1/runs", json={"runId": "bent", "webhook": {"url": url}})
    assert refused.status_code == 422 and refused.json()["code"] == "invalid_webhook"


def test_a_name_that_resolves_inside_is_refused_at_creation(make_settings: Any, hosts: dict[str, str]) -> None:
    """A name is judged by its addresses: one that resolves to a private address is 422."""
    hosts["hooks.test"] = "10.0.0.7"
    with serve(make_settings, webhook_allow_private=False) as base, httpx.Client(base_url=base) as http:
        refused = http.post("/v1/runs", json={"runId": "named", "webhook": {"url": "http://hooks.test/hook"}})
    assert refused.status_code == 422 and "private address (10.0.0.7)" in refused.json()["detail"]


def test_a_name_that_rebinds_to_loopback_is_refused_at_delivery(make_settings: Any, receiver: Receiver,
                                                                hosts: dict[str, str]) -> None:
    """Public at creation, loopback at delivery: the attempt is refused and recorded, nothing is sent."""
    port = receiver.url.split(":")[2].split("/")[0]
    hosts["rebind.test"] = "93.184.216.34"
    with serve(make_settings, webhook_allow_private=False, webhook_max_attempts=2) as base, \
            httpx.Client(base_url=base) as http:
        http.post("/v1/runs", json={"runId": "rebound", "webhook": {"url": f"http://rebind.test:{port}/hook"}}
                  ).raise_for_status()
        hosts["rebind.test"] = "127.0.0.1"
        http.post("/v1/runs/rebound/end", json={"stopReason": "end_turn"}).raise_for_status()
        [delivery] = deliveries_when(http, "rebound", settled)
    assert receiver.requests == []
    assert delivery["state"] == "failed" and len(delivery["attempts"]) == 2
    assert all("loopback address (127.0.0.1)" in a["error"] and "statusCode" not in a for a in delivery["attempts"])


def test_localhost_stored_earlier_is_refused_at_delivery(make_settings: Any, receiver: Receiver) -> None:
    """A run made while private targets were allowed is not delivered inside once they are not."""
    local = receiver.url.replace("127.0.0.1", "localhost")
    with serve(make_settings) as base, httpx.Client(base_url=base) as http:
        http.post("/v1/runs", json={"runId": "local", "webhook": {"url": local}}).raise_for_status()
    with serve(make_settings, webhook_allow_private=False, webhook_max_attempts=1) as base, \
            httpx.Client(base_url=base) as http:
        http.post("/v1/runs/local/end", json={"stopReason": "end_turn"}).raise_for_status()
        [delivery] = deliveries_when(http, "local", settled)
    assert receiver.requests == []
    assert delivery["state"] == "failed" and "refused, not sent" in delivery["attempts"][0]["error"]


def test_delivery_dials_the_checked_address_and_keeps_the_host(make_settings: Any, receiver: Receiver,
                                                               hosts: dict[str, str]) -> None:
    """The name is looked up once per attempt; the request reaches that address with the name as Host."""
    port = receiver.url.split(":")[2].split("/")[0]
    hosts["hooks.test"] = "127.0.0.1"
    with serve(make_settings) as base, httpx.Client(base_url=base) as http:
        http.post("/v1/runs", json={"runId": "pinned", "webhook": {"url": f"http://hooks.test:{port}/hook"}}
                  ).raise_for_status()
        http.post("/v1/runs/pinned/end", json={"stopReason": "end_turn"}).raise_for_status()
        [delivery] = deliveries_when(http, "pinned", settled)
    assert delivery["state"] == "delivered"
    [request] = receiver.requests
    assert request.headers["host"] == f"hooks.test:{port}"
    assert hosts["#hooks.test"] == "1"  # the sender's one lookup (creation skips it when private is allowed)


def stored_copies(database_url: str, needle: str, tmp_path: Any) -> int:
    """How many stored values hold ``needle``: every text column of every table (and, on SQLite,
    the bytes of a clean copy of the file, which holds no stale pages)."""
    if database_url.startswith("sqlite:///"):
        clean = tmp_path / "clean.db"
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as db:
            db.execute(f"VACUUM INTO '{clean}'")
        return int(clean.read_bytes().count(needle.encode()))
    found = 0
    with psycopg.connect(database_url) as db:
        columns = db.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND data_type IN ('text', 'character varying', 'jsonb')").fetchall()
        for table, column in columns:
            row = db.execute(psycopg.sql.SQL("SELECT count(*) FROM {} WHERE {}::text LIKE %s").format(
                psycopg.sql.Identifier(table), psycopg.sql.Identifier(column)), (f"%{needle}%",)).fetchone()
            found += int(row[0]) if row else 0
    return found


def test_the_secret_is_stored_once(make_settings: Any, database_url: str, receiver: Receiver, tmp_path: Any) -> None:
    """The webhooks table holds the secret; neither the run's stored spec nor its deliveries copy it,
    and the same create stays idempotent (a different secret is a 409)."""
    secret = new_secret()
    body = {"runId": "kept", "mode": "continuable", "webhook": {"url": receiver.url, "secret": secret}}
    with serve(make_settings) as url, httpx.Client(base_url=url) as http:
        assert http.post("/v1/runs", json=body).status_code == 201
        assert http.post("/v1/runs", json=body).status_code == 200
        other = http.post("/v1/runs", json={**body, "webhook": {"url": receiver.url, "secret": new_secret()}})
        for _ in range(2):
            http.post("/v1/runs/kept/end", json={"stopReason": "end_turn"}).raise_for_status()
            http.post("/v1/runs/kept/turns")
        deliveries = deliveries_when(http, "kept", lambda ds: len(ds) == 2 and settled(ds))
    assert other.status_code == 409 and other.json()["code"] == "run_exists"
    assert [d["state"] for d in deliveries] == ["delivered", "delivered"]
    for request in receiver.requests:
        Webhook(secret).verify(request.body, request.headers)  # still signed with it
    assert stored_copies(database_url, secret.removeprefix("whsec_"), tmp_path) == 1


def store_url_as_an_older_release_did(database_url: str, run_id: str, url: str) -> None:
    """Write ``url`` as the run's webhook target straight into the database, as a release that did
    not check it would have stored it (its deliveries copy the target when an end commits)."""
    if database_url.startswith("sqlite:///"):
        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as db:
            assert db.execute("UPDATE webhooks SET url = ? WHERE run_id = ?", (url, run_id)).rowcount == 1
    else:
        with psycopg.connect(database_url) as db:
            assert db.execute("UPDATE webhooks SET url = %s WHERE run_id = %s", (url, run_id)).rowcount == 1


@pytest.mark.parametrize("stored", ["http://xn--zz.example/hook", "http://[::1]x/hook", "http://hooks.example:http/"])
def test_a_delivery_whose_request_cannot_be_built_fails_after_the_maximum_attempts(
        make_settings: Any, database_url: str, stored: str) -> None:
    """A target stored before today's checks, that no request can be built for, is an attempt with
    an error each time it falls due, and ``failed`` after the maximum attempts; then it is left alone."""
    clock = ManualClock()
    settings = make_settings(webhook_max_attempts=3, webhook_backoff_seconds=10.0)
    with threaded_server(settings, clock) as base, httpx.Client(base_url=base) as http:
        # A literal global address passes creation without a lookup; it is replaced before any attempt.
        http.post("/v1/runs", json={"runId": "old", "webhook": {"url": "http://93.184.216.34/hook"}}
                  ).raise_for_status()
        store_url_as_an_older_release_did(database_url, "old", stored)
        http.post("/v1/runs/old/end", json={"stopReason": "end_turn"}).raise_for_status()
        for made in (1, 2):
            [delivery] = deliveries_when(http, "old", lambda ds, made=made: len(ds[0]["attempts"]) == made)
            assert delivery["state"] == "pending"
            clock.advance(10.0 * 2 ** made)  # past the longest jittered delay (1.5 × the doubled backoff)
        [delivery] = deliveries_when(http, "old", settled)
        clock.advance(3600.0)
        clock.wait_for_reads(3)  # the sender looked again at the new time
        [after] = http.get("/v1/runs/old/deliveries").json()["deliveries"]
    assert delivery["state"] == "failed" and len(delivery["attempts"]) == 3
    assert all(a["error"].startswith("no request could be built for webhook.url") and "statusCode" not in a
               for a in delivery["attempts"])
    assert after == delivery
