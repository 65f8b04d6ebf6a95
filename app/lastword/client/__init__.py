"""The clients a parent agent or a child uses (httpx and pydantic only; no server module).

``from lastword.client import LastwordClient`` keeps working: the public names of
:mod:`lastword.client.core` are re-exported here.
"""

from lastword.client.core import AsyncLastwordClient, LastwordAPIError, LastwordClient, StreamMessage

__all__ = ["AsyncLastwordClient", "LastwordAPIError", "LastwordClient", "StreamMessage"]
