"""The app's lifespan closes what it opened, at shutdown and when its start fails half-way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lastword.main import create_app
from lastword.service import RunService
from lastword.webhooks.sender import WebhookSender


def test_a_failed_start_leaks_no_webhook_client(make_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's start fails after the webhook sender opened its HTTP client: the lifespan
    raises the failure, and the client is closed (before, it was left open)."""
    senders: list[WebhookSender] = []
    build = WebhookSender.__init__

    def recorded(sender: WebhookSender, *args: Any, **kwargs: Any) -> None:
        build(sender, *args, **kwargs)
        senders.append(sender)

    async def failing_start(service: RunService) -> None:
        raise RuntimeError("the start-up sweep failed")  # as a store failing mid-sweep would

    monkeypatch.setattr(WebhookSender, "__init__", recorded)
    monkeypatch.setattr(RunService, "start", failing_start)
    app = create_app(make_settings())

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(RuntimeError, match="start-up sweep failed"):
        asyncio.run(start())
    assert len(senders) == 1
    assert senders[0]._client.is_closed


def test_a_stopped_app_has_closed_its_webhook_client(make_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    senders: list[WebhookSender] = []
    build = WebhookSender.__init__

    def recorded(sender: WebhookSender, *args: Any, **kwargs: Any) -> None:
        build(sender, *args, **kwargs)
        senders.append(sender)

    monkeypatch.setattr(WebhookSender, "__init__", recorded)
    app = create_app(make_settings())

    async def run() -> None:
        async with app.router.lifespan_context(app):
            assert not senders[0]._client.is_closed

    asyncio.run(run())
    assert senders[0]._client.is_closed
