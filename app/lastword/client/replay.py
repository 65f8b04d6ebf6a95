"""A child's output read once from its source and kept, so that every request sends it whole.

A CLI's output goes to the service as one long request, its lines written as the child prints
them. When that request fails, the next one must start again at the first line (the service
numbers the lines of a body to derive their ``eventId``s, so a body that starts elsewhere would
be read as new lines): a :class:`Replay` keeps every line it took from its source, and each
:meth:`~Replay.body` first writes what is kept, then goes on taking lines from the source, so
no line is lost between two requests and none is taken twice from the source.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator


class Replay:
    """Lines taken once from ``source``; each body sends all of them from the first."""

    def __init__(self, source: Iterable[bytes]) -> None:
        self._source = iter(source)
        self._kept: list[bytes] = []

    def body(self) -> Iterator[bytes]:
        if self._kept:
            yield b"".join(self._kept)
        for line in self._source:
            self._kept.append(line)  # before it is written: a request that fails now loses nothing
            yield line


class AsyncReplay:
    """:class:`Replay` of an async source."""

    def __init__(self, source: AsyncIterable[bytes]) -> None:
        self._source = aiter(source)
        self._kept: list[bytes] = []

    async def body(self) -> AsyncIterator[bytes]:
        if self._kept:
            yield b"".join(self._kept)
        async for line in self._source:
            self._kept.append(line)
            yield line
