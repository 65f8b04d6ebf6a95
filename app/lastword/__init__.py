"""lastword: keeps a subagent's last word.

The package's public face is the client: ``from lastword import LastwordClient`` (and
``AsyncLastwordClient``, ``StreamMessage``, and the errors ``LastwordError``,
``LastwordAPIError``, ``LastwordConnectionError``). It is loaded on
first use, so importing ``lastword`` (or ``lastword.client``) pulls in neither the server's
framework nor a database driver — a parent agent's own project pays only for httpx and pydantic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from lastword.client import (
        AsyncLastwordClient,
        LastwordAPIError,
        LastwordClient,
        LastwordConnectionError,
        LastwordError,
        StreamMessage,
    )

__all__ = ["AsyncLastwordClient", "LastwordAPIError", "LastwordClient", "LastwordConnectionError", "LastwordError",
           "StreamMessage", "__version__"]


def __getattr__(name: str) -> Any:
    if name in __all__ and name != "__version__":
        from lastword import client

        return getattr(client, name)
    raise AttributeError(f"module 'lastword' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazily loaded names are not in the module's namespace until first used: without this,
    # dir(lastword) (and a REPL's completion) would not show the client at all.
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
