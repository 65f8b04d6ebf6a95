"""Webhooks (SPEC §14): what a delivery is, independent of how it is stored or sent.

A run created with ``webhook: {url, secret?}`` has each ``subagent/end`` POSTed to ``url`` in the
Standard Webhooks form. This module holds the rules: which targets are allowed, the signature
headers, the backoff between attempts and when a delivery gives up. The payload and the stable
``webhook-id``, which the store writes in the end's transaction, are
:mod:`lastword.rules.webhook_payload`'s; the outbox rows live in :mod:`lastword.store.sql.outbox`; the
sender that works through them is :mod:`lastword.webhooks.sender`.

Choices made here:

* **The payload is fixed when the end commits.** Its bytes are stored in the outbox, so every
  retry sends the same body; only ``webhook-timestamp`` and the signature are made per attempt
  (receivers reject old timestamps, which a retry hours later would otherwise carry).
* **Allowed hosts match the URL's host name**, exactly or by a ``*.`` suffix; unset or ``*``
  allows any host. The check is on the name as written; what the name resolves to is judged by
  :mod:`lastword.webhooks.addresses` (internal addresses are refused unless
  ``LASTWORD_WEBHOOK_ALLOW_PRIVATE=true``).
* **Backoff** doubles from ``LASTWORD_WEBHOOK_BACKOFF_SECONDS`` with jitter of ±50 %, so
  deliveries that failed together do not retry together.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import random
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from standardwebhooks.webhooks import Webhook

from lastword.errors import InvalidWebhook
from lastword.webhooks.addresses import (
    RefusedAddress,
    check_addresses,
    literal_address,
    literal_refusal,
    resolve,
)

#: The most characters of a receiver's answer kept with an attempt (the rest is never read).
RESPONSE_EXCERPT = 200
SECRET_PREFIX = "whsec_"
MAX_RETRY_DELAY_SECONDS = 3600.0
#: Longest a webhook host's lookup may take at creation before the run is created unjudged
#: (its deliveries are still checked).
RESOLVE_SECONDS = 5.0


def allowed_host_patterns(setting: str) -> tuple[str, ...]:
    """``LASTWORD_WEBHOOK_ALLOWED_HOSTS`` as patterns; empty means any host."""
    patterns = tuple(part.strip().lower() for part in setting.split(",") if part.strip())
    return () if "*" in patterns else patterns


def host_allowed(host: str, patterns: Sequence[str]) -> bool:
    if not patterns:
        return True
    host = host.lower().rstrip(".")
    for pattern in patterns:
        if pattern.startswith("*."):
            if host.endswith(pattern[1:]) and host != pattern[2:]:
                return True
        elif host == pattern:
            return True
    return False


def check_webhook(url: str, secret: str | None, allowed: Sequence[str], *, allow_private: bool = False) -> None:
    """Raise :class:`InvalidWebhook` (422) for a target or secret this service will not use.

    A host written as an internal address (in any spelling) is refused here unless
    ``allow_private``; a name is judged by what it resolves to (:func:`check_resolved_webhook`).
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as malformed:
        raise InvalidWebhook(f"webhook.url is not a well-formed URL: {malformed}", field="webhook.url") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidWebhook("webhook.url must be an http(s) URL with a host", field="webhook.url")
    if parts.username is not None or parts.password is not None:
        raise InvalidWebhook("webhook.url must not carry credentials; use webhook.secret", field="webhook.url")
    if not host_allowed(parts.hostname, allowed):
        raise InvalidWebhook(
            f"webhook host {parts.hostname!r} is not in LASTWORD_WEBHOOK_ALLOWED_HOSTS", field="webhook.url"
        )
    if not allow_private:
        refused = literal_refusal(parts.hostname)
        if refused is not None:
            raise InvalidWebhook(f"webhook.url's host {refused}", field="webhook.url")
    try:
        httpx.Request("POST", url)  # as the sender builds its requests (the host's IDNA form included)
    except (httpx.InvalidURL, ValueError) as malformed:  # IDNA refusals are UnicodeErrors
        raise InvalidWebhook(f"webhook.url is not a well-formed URL: {malformed}", field="webhook.url") from None
    if secret is not None and not _is_secret(secret):
        raise InvalidWebhook(
            "webhook.secret must be 'whsec_' followed by base64, as Standard Webhooks libraries make them",
            field="webhook.secret",
        )


async def check_resolved_webhook(url: str) -> None:
    """Raise :class:`InvalidWebhook` when the URL's host name resolves to an address webhooks may
    not reach (call after :func:`check_webhook`, unless private targets are allowed).

    A name that does not resolve now, or not within :data:`RESOLVE_SECONDS`, passes: it may
    resolve later, and each delivery resolves and checks it again before connecting.
    """
    parts = urlsplit(url)
    host = parts.hostname or ""
    if literal_address(host) is not None:
        return  # judged by check_webhook already
    try:
        async with asyncio.timeout(RESOLVE_SECONDS):
            addresses = await resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
    except (OSError, UnicodeError, TimeoutError):
        return
    try:
        check_addresses(host, addresses)
    except RefusedAddress as refused:
        raise InvalidWebhook(f"webhook.url's host {refused}", field="webhook.url") from None


def _is_secret(secret: str) -> bool:
    if not secret.startswith(SECRET_PREFIX):
        return False
    # Padded ("…=") or not, as Standard Webhooks libraries read it: at most two '=' at the end,
    # then the padding the length calls for, decoded strictly (no '=' inside, no other characters).
    encoded = secret[len(SECRET_PREFIX):]
    unpadded = encoded.rstrip("=")
    if len(encoded) - len(unpadded) > 2:
        return False
    try:
        key = base64.b64decode(unpadded + "=" * (-len(unpadded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(key) > 0


def headers(message_id: str, body: str, secret: str | None, now: float) -> dict[str, str]:
    """The Standard Webhooks headers of one attempt (signed when the run gave a secret)."""
    moment = datetime.fromtimestamp(int(now), UTC)
    values = {
        "content-type": "application/json",
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now)),
    }
    if secret is not None:
        values["webhook-signature"] = Webhook(secret).sign(message_id, moment, body)
    return values


def retry_delay(attempts_made: int, base_seconds: float, rng: random.Random) -> float:
    """Seconds before the next attempt, after ``attempts_made`` failed ones (doubling, ±50 %,
    never more than :data:`MAX_RETRY_DELAY_SECONDS`, so a receiver back after a long outage
    hears within the hour)."""
    doubled = base_seconds * 2.0 ** min(attempts_made - 1, 64)
    return float(min(doubled, MAX_RETRY_DELAY_SECONDS) * rng.uniform(0.5, 1.5))


def attempt_record(at: str, duration_ms: float, status: int | None, error: str | None, excerpt: str | None) -> dict[str, Any]:
    """One attempt as ``GET …/deliveries`` shows it."""
    record: dict[str, Any] = {"at": at}
    if status is not None:
        record["statusCode"] = status
    if error is not None:
        record["error"] = error
    if excerpt:
        record["response"] = excerpt
    record["durationMs"] = round(duration_ms, 1)
    return record
