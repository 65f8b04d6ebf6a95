"""The app's lifespan closes what it opened, at shutdown and when its start fails half-way."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fastapi import FastAPI

from lastword import core, registry
from lastword.main import create_app
from lastword.service import RunService
from lastword.settings import Settings
from lastword.store.base import Store
from lastword.webhooks.sender import WebhookSender


def run_lifespan(app: FastAPI) -> None:
    """Start the app's lifespan and stop it at once."""

    async def start_and_stop() -> None:
        async with app.router.lifespan_context(app):
            pass

    asyncio.run(start_and_stop())


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

    with pytest.raises(RuntimeError, match="start-up sweep failed"):
        run_lifespan(app)
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


def noting_close(store: Store, closes: list[Store]) -> Callable[[], Awaitable[None]]:
    """``store.close``, noting in ``closes`` that it ran."""
    close = store.close

    async def noted() -> None:
        await close()
        closes.append(store)

    return noted


def test_a_failed_start_closes_the_store(make_settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store is opened, then building the fan-out fails: the lifespan raises the failure and
    the store is closed (before, only the service closed it, and no service had been built)."""
    closes: list[Store] = []

    def open_noted(settings: Settings, hub: object) -> Store:
        store = registry.open_store(settings)
        monkeypatch.setattr(store, "close", noting_close(store, closes))
        return store

    def failing_fanout(*args: object) -> None:
        raise RuntimeError("the fan-out could not be built")

    monkeypatch.setattr(core, "open_store", open_noted)
    monkeypatch.setattr(core, "open_fanout", failing_fanout)
    app = create_app(make_settings())

    with pytest.raises(RuntimeError, match="fan-out could not be built"):
        run_lifespan(app)
    assert len(closes) == 1, "the store was not closed once"
