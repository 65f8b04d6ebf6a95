"""Commit notices between replicas over NATS (``LASTWORD_FANOUT_URL=nats://…``).

PostgreSQL's ``NOTIFY`` takes a lock at commit that every writing transaction of the database
queues on; with many replicas writing, that lock is the ceiling. With a NATS URL set, the store
sends no ``NOTIFY``: it hands each notice to this fan-out once its transaction has committed
(:meth:`lastword.store.postgres.store.PostgresStore.announce_after_commit`), and the fan-out

* wakes this replica's own cursors at once (no round trip for its own subscribers), and
* publishes the notice on NATS: one subject per run (``<prefix>.run.<run id>``), one for the
  firehose (``<prefix>.feed``, when the commit has a feed id), one for the Durable Streams
  (``<prefix>.ds``). The prefix names the deployment: ``lastword.<database>.<schema>``.

Every replica subscribes to ``<prefix>.>`` (with ``no_echo``: not its own). NATS core delivers
at most once and in no order across publishers, so a notice only says *whom* to wake: the
cursors (:mod:`lastword.fanout.cursors`) read the log after what they last published, in
the log's order. Nothing a notice says is taken for an event.

Lost notices are caught up from the log. While this replica is cut off from NATS, ``/readyz``
says ``notices_unavailable``; when it is connected again it reads after every cursor and wakes
every Durable Streams reader, and it publishes ``<prefix>.all`` so that every other replica does
the same: notices it published while cut off may never have left it. A subscriber too slow for
its pending limit (NATS drops what overflows) counts as cut off too.

A replica that dies between a commit and its publish leaves that commit unheard by the others
(``NOTIFY`` would have delivered it): the cursors' sweep (:data:`SWEEP_SECONDS`) reads it, or
the run's next notice, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from nats.aio.client import Client

from lastword.errors import Unavailable
from lastword.fanout.cursors import CursorLog, CursorPublisher
from lastword.fanout.hub import Hub
from lastword.fanout.local import Fanout, Wakeups
from lastword.rules.records import StoredEvent
from lastword.store.notices import Notice, StreamNotice, parse_notice

if TYPE_CHECKING:
    from nats.aio.msg import Msg

log = logging.getLogger("lastword")

#: The URL schemes a fan-out URL may use (``tls``: NATS over TLS).
SCHEMES = ("nats", "tls")
#: Seconds to reach NATS at start-up, and between two attempts to reach it again.
CONNECT_TIMEOUT = 2
RECONNECT_WAIT = 1
#: Seconds a replica waits at start-up for NATS before it gives up (and says why).
STARTUP_SECONDS = 5.0
#: How often every cursor is read whether woken or not: the longest a commit whose notice was
#: never published (its replica died right after the commit) waits to reach a stream here.
SWEEP_SECONDS = 5.0
#: A link that went silent is noticed after this many seconds times two unanswered pings.
PING_INTERVAL = 5


def check_url(url: str) -> list[str]:
    """The servers of a fan-out URL (comma-separated for a cluster); :class:`Unavailable` naming
    the URL when it is not NATS's."""
    servers = [server.strip() for server in url.split(",") if server.strip()]
    if not servers or any(urlsplit(server).scheme not in SCHEMES or not urlsplit(server).hostname
                          for server in servers):
        raise Unavailable(f"unsupported fan-out URL {url!r}: use nats://HOST:PORT (comma-separated for a cluster)")
    return servers


def subject_prefix(database: str, schema: str) -> str:
    """The subjects of one deployment: its database and schema, each one subject token."""
    return f"lastword.{_token(database or '-')}.{_token(schema)}"


def _token(name: str) -> str:
    # A subject token holds no '.', no whitespace, and is not '*' or '>'.
    return quote(name, safe="-_:").replace(".", "%2E")


class NatsFanout(Fanout):
    """Hear other replicas' commits over NATS, publish from the log at cursors (see the module)."""

    def __init__(self, hub: Hub, store: CursorLog, url: str, prefix: str, wakeups: Wakeups | None = None) -> None:
        super().__init__(hub, wakeups)
        self.url = url
        self.servers = check_url(url)
        self.prefix = prefix
        self.cursors = CursorPublisher(hub, store, sweep_seconds=SWEEP_SECONDS)
        self._client: Client | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Notices of committed transactions, appended by the store's threads.
        self._outbox: deque[Notice | StreamNotice] = deque()
        self._scheduled = False
        self._sending: set[asyncio.Task[None]] = set()
        self._flag = threading.Lock()
        self._first_error: Exception | None = None

    # -- the store's side -----------------------------------------------------------------

    def announce(self, notice: Notice | StreamNotice) -> None:
        """A transaction committed ``notice`` (called from the store's threads)."""
        self._outbox.append(notice)
        with self._flag:
            if self._scheduled or self._loop is None:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is left to tell
            self._loop.call_soon_threadsafe(self._send_outbox)

    def committed(self, stored: Sequence[StoredEvent]) -> None:
        pass  # announced by the store after the commit, with the notices the hub does not carry

    def _send_outbox(self) -> None:
        with self._flag:
            self._scheduled = False
        messages: dict[str, bytes] = {}  # one per subject: a notice only says whom to wake
        while self._outbox:
            notice = self._outbox.popleft()
            if isinstance(notice, StreamNotice):
                messages[f"{self.prefix}.ds"] = notice.payload().encode()
                continue
            self.cursors.wake_run(notice.run_id)
            messages[f"{self.prefix}.run.{_token(notice.run_id)}"] = notice.payload().encode()
            if notice.feed_id is not None:
                self.cursors.wake_feed()
                messages[f"{self.prefix}.feed"] = notice.payload().encode()
        if messages:
            self._spawn(self._publish(messages))

    async def _publish(self, messages: dict[str, bytes]) -> None:
        client = self._client
        if client is None:
            return
        try:
            for subject, data in messages.items():
                await client.publish(subject, data)
        except Exception as error:  # its pending buffer is full while NATS is away: lost, caught up
            log.warning("could not publish %d commit notices to NATS (%s)", len(messages), error)

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    # -- life -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.cursors.start()
        client = Client()
        try:
            # nats-py retries a first connection as it does a lost one (forever, here): bounded.
            await asyncio.wait_for(client.connect(
                self.servers, name="lastword", no_echo=True, connect_timeout=CONNECT_TIMEOUT,
                allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=RECONNECT_WAIT,
                ping_interval=PING_INTERVAL, max_outstanding_pings=2,
                error_cb=self._error, disconnected_cb=self._disconnected, reconnected_cb=self._reconnected,
            ), STARTUP_SECONDS)
        except Exception as error:  # refused, timed out, a URL nats-py cannot parse
            with contextlib.suppress(Exception):
                await client.close()
            await self.cursors.close()
            reason = self._first_error or error
            raise Unavailable(f"cannot reach NATS at {self.url} (LASTWORD_FANOUT_URL) within {STARTUP_SECONDS:g} s: "
                              f"{str(reason) or type(reason).__name__}") from None
        self._client = client
        # Subscribed before returning: nothing committed from now on goes unheard.
        await client.subscribe(f"{self.prefix}.>", cb=self._heard)
        await client.flush(timeout=CONNECT_TIMEOUT)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.drain()
        for task in list(self._sending):
            task.cancel()
        await self.cursors.close()

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.is_connected

    # -- NATS's side ----------------------------------------------------------------------

    async def _heard(self, message: Msg) -> None:
        kind, _, _ = message.subject[len(self.prefix) + 1:].partition(".")
        if kind == "feed":
            self.cursors.wake_feed()
        elif kind == "all":
            self._lost("another replica was cut off from NATS")
        elif kind in ("run", "ds"):
            try:
                notice = parse_notice(message.data.decode())
            except (ValueError, KeyError, TypeError):
                log.warning("ignored a malformed notice on %s: %.200r", message.subject, message.data)
                return
            if isinstance(notice, StreamNotice):
                if notice.path is None:
                    self.wakeups.wake_all()
                else:
                    self.wakeups.changed(notice.path)
            else:
                self.wakeups.run_changed(notice.run_id)
                self.cursors.wake_run(notice.run_id)

    def _lost(self, why: str) -> None:
        log.info("%s; subscribers catch up from the log", why)
        self.cursors.wake_all()
        self.wakeups.wake_all()

    async def _error(self, error: Exception) -> None:
        from nats.errors import SlowConsumerError

        if self._client is None:
            self._first_error = self._first_error or error  # still starting: said if it gives up
        elif isinstance(error, SlowConsumerError):
            self._lost("notices arrived faster than they were read, and NATS dropped some")
        else:
            log.debug("NATS: %s", error)

    async def _disconnected(self) -> None:
        if self._client is not None:
            log.warning("lost the NATS connection; reconnecting")

    async def _reconnected(self) -> None:
        self._lost("NATS connection re-established")
        client = self._client
        if client is not None:
            # What this replica published while cut off may not have reached anyone.
            with contextlib.suppress(Exception):
                await client.publish(f"{self.prefix}.all", b"{}")
