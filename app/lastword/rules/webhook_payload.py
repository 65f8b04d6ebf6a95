"""What a webhook delivery carries (SPEC §14), fixed when the turn's end commits.

The store writes the delivery into its outbox inside the end's transaction, so the body and the
id are rules the store needs; the rest of the webhook rules (targets, signatures, backoff) are the
sender's, in :mod:`lastword.webhooks.rules`.

The payload's bytes are stored with the delivery: every retry sends the same body.
"""

from __future__ import annotations

from typing import Any

import orjson

#: The Standard Webhooks ``type`` of a delivery.
EVENT_TYPE = "subagent.end"


def webhook_id(run_id: str, turn: int) -> str:
    """The delivery's id: stable across its retries, unique since run ids are never reused."""
    return f"msg_{run_id}_{turn}"


def payload(end: dict[str, Any]) -> str:
    """The body POSTed for one ``subagent/end`` event, as the run's stream serves it."""
    return orjson.dumps({"type": EVENT_TYPE, "timestamp": end["endedAt"], "data": end}).decode()
