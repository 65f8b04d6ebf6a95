"""lastword: keeps a subagent's last word.

The package's public face is the client: ``from lastword import LastwordClient``. It is loaded on
first use, so importing ``lastword`` (or ``lastword.client``) pulls in neither the server's
framework nor a database driver — a parent agent's own project pays only for httpx and pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from lastword.client.core import AsyncLastwordClient, LastwordAPIError, LastwordClient, StreamMessage

__all__ = ["AsyncLastwordClient", "LastwordAPIError", "LastwordClient", "StreamMessage", "__version__"]


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "__version__":
        from lastword.client import core as client

        return getattr(client, name)
    raise AttributeError(f"module 'lastword' has no attribute {name!r}")
