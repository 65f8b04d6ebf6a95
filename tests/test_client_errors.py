"""The clients' errors are lastword's: a service that cannot be reached raises
``LastwordConnectionError`` (not a raw ``httpx.ConnectError``), every error is a ``LastwordError``,
and ``lastword`` shows and exports them as the docs name them."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

import lastword
import lastword.client
from tests.servers import free_port

REPO = Path(__file__).resolve().parents[1]
ERRORS = ["LastwordError", "LastwordAPIError", "LastwordConnectionError"]


def dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}"


def test_a_service_not_there_raises_the_clients_own_error() -> None:
    """Every call, a stream and the firehose included, ends in LastwordConnectionError naming the
    address, with httpx's error as its cause (and still an httpx.TransportError for old code)."""
    url = dead_url()
    with lastword.LastwordClient(url, retries=0) as client:
        for call in (client.health, lambda: client.result("r1"), lambda: list(client.stream("r1")),
                     lambda: list(client.stream_all()), lambda: client.push_text("r1", "x")):
            with pytest.raises(lastword.LastwordConnectionError) as raised:
                call()
            assert isinstance(raised.value, lastword.LastwordError)
            assert isinstance(raised.value, httpx.TransportError)
            assert isinstance(raised.value.__cause__, httpx.ConnectError)
            assert str(raised.value).startswith(f"cannot reach the service at {url}: ")


@pytest.mark.anyio
async def test_the_async_client_raises_it_too() -> None:
    """The asynchronous client's calls and streams raise the same error."""
    async with lastword.AsyncLastwordClient(dead_url(), retries=0) as client:
        with pytest.raises(lastword.LastwordConnectionError):
            await client.health()
        with pytest.raises(lastword.LastwordConnectionError):
            async for _ in client.stream_all():
                pass


def test_a_refusal_is_a_lastword_error(base_url: str) -> None:
    """LastwordAPIError, the refusal, is caught by ``except LastwordError`` as well."""
    with lastword.LastwordClient(base_url) as client, pytest.raises(lastword.LastwordError) as raised:
        client.result("no-such-run")
    assert isinstance(raised.value, lastword.LastwordAPIError) and raised.value.code == "run_not_found"


def test_the_public_names_are_exported_and_shown() -> None:
    """``lastword`` and ``lastword.client`` export the clients and the errors, and dir(lastword)
    shows them (they are loaded on first use, so the module's namespace alone would not)."""
    for name in ["LastwordClient", "AsyncLastwordClient", "StreamMessage", *ERRORS]:
        assert name in lastword.__all__ and name in dir(lastword), name
        assert name in lastword.client.__all__, name
        assert getattr(lastword, name) is getattr(lastword.client, name)
    assert [name for name in dir(lastword) if not name.startswith("_")] == sorted(
        name for name in lastword.__all__ if not name.startswith("_"))


def test_the_docs_name_the_errors_and_import_from_lastword() -> None:
    """docs/CLIENT.md names each error, and every Python example in the README and docs imports
    the client one way: ``from lastword import ...``."""
    client_doc = (REPO / "docs" / "CLIENT.md").read_text()
    assert all(f"`{name}`" in client_doc for name in ERRORS)
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        imports = re.findall(r"^from (lastword\.client\S*) import .*(?:Client|Error)", page.read_text(), re.M)
        assert imports == [], (page.name, imports)
