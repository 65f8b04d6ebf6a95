"""The clients a parent agent or a child uses (httpx and pydantic only; no server module).

``from lastword import LastwordClient`` is the import path the docs use; ``lastword.client``
holds the same names (the public names of :mod:`lastword.client.core`).
"""

from lastword.client.core import (
    AsyncLastwordClient,
    LastwordAPIError,
    LastwordClient,
    LastwordConnectionError,
    LastwordError,
    StreamMessage,
)

__all__ = ["AsyncLastwordClient", "LastwordAPIError", "LastwordClient", "LastwordConnectionError", "LastwordError",
           "StreamMessage"]
