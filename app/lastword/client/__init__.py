"""The clients a parent agent or a child uses (httpx and pydantic only; no server module).

``from lastword import LastwordClient`` is the import path the docs use; ``lastword.client``
holds the same names, gathered here from the modules that define them.
"""

from lastword.client.aio import AsyncLastwordClient
from lastword.client.errors import LastwordAPIError, LastwordConnectionError, LastwordError
from lastword.client.streams import StreamMessage
from lastword.client.sync import LastwordClient

__all__ = ["AsyncLastwordClient", "LastwordAPIError", "LastwordClient", "LastwordConnectionError", "LastwordError",
           "StreamMessage"]
