"""The webhook sender: works through the outbox, one attempt per leased delivery.

Each replica runs one sender. It wakes when this replica commits an end (so a delivery usually
leaves within milliseconds of its end), when the earliest retry falls due, and at least every
:data:`POLL_SECONDS` (ends committed by other replicas, deliveries a dead replica left behind).
Each look reads when the next delivery is due and leases (a write transaction) only when one
is, so the ends of runs without a webhook, and an idle replica's polls, write nothing. A
delivery whose attempt is in flight is due again only when its lease runs out.
Each attempt is bounded by ``LASTWORD_WEBHOOK_TIMEOUT_SECONDS`` as a whole (connect, send, the
answer's head), and a lease is that time plus :data:`LEASE_MARGIN_SECONDS`, so no lease runs out
while its own attempt is still going and two replicas never POST the same delivery at once.

Redirects are not followed (a redirect is an answer that is not 2xx: the delivery is retried);
of an answer's body only the first :data:`lastword.webhooks.rules.RESPONSE_EXCERPT` characters are
read and kept. Secrets and URLs are never logged: a log line names the ``webhook-id`` only.
Connections go through :mod:`lastword.webhooks.pinned`: the target's name is resolved once per
connection, every address checked, and the checked address dialled; an attempt refused there
is recorded with its reason and nothing is sent. So is an attempt whose request cannot be built
from the stored URL (:func:`unbuildable_error`): it counts towards the maximum attempts.

On SIGTERM (:meth:`WebhookSender.drain`) the sender leases nothing more and lets the attempts
in flight finish within the drain; what is still in flight when the sender closes (at the
drain's deadline) is cancelled and its lease released, so another replica, or this one
restarted, attempts it at once rather than after the lease runs out. A released attempt may have
reached its receiver already: delivery is at least once, and the ``webhook-id`` says which. (A
second SIGTERM exits without closing anything: those leases run out as after a crash.)
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

import httpx

from lastword import __version__
from lastword.metrics import Metrics
from lastword.rules.lifecycle import rfc3339
from lastword.rules.records import DeliveryJob, StoredEvent
from lastword.store.protocols import Outbox
from lastword.webhooks.addresses import RefusedAddress
from lastword.webhooks.pinned import pinned_transport
from lastword.webhooks.rules import RESPONSE_EXCERPT, attempt_record, headers, retry_delay

log = logging.getLogger("lastword")

#: Longest sleep between looks at the outbox when nothing local wakes the sender.
POLL_SECONDS = 1.0
#: A lease outlasts its attempt's time-out by this much (the outcome's own write included).
LEASE_MARGIN_SECONDS = 5.0
#: Deliveries leased per look; more wait for the next look.
CLAIM_BATCH = 32


class WebhookSender:
    def __init__(
        self,
        store: Outbox,
        metrics: Metrics,
        *,
        backoff_seconds: float,
        max_attempts: int,
        timeout_seconds: float,
        clock: Callable[[], float] = time.time,
        allow_private: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._store = store
        self._metrics = metrics
        self._backoff = backoff_seconds
        self._max_attempts = max_attempts
        self._timeout = timeout_seconds
        self._clock = clock
        self._rng = random.Random()
        self._wake = asyncio.Event()
        self._client = httpx.AsyncClient(
            follow_redirects=False, timeout=timeout_seconds, trust_env=False,
            transport=transport or pinned_transport(allow_private=allow_private),
            headers={"user-agent": f"lastword/{__version__}"},
        )
        self._task: asyncio.Task[None] | None = None
        self._in_flight: dict[asyncio.Task[None], DeliveryJob] = {}
        self._draining = False

    def ended(self, event: StoredEvent) -> None:
        """An end committed here: its delivery (if the run has a webhook) is due now."""
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    def drain(self) -> None:
        """The replica is draining: lease no more deliveries; the attempts in flight go on."""
        self._draining = True
        self._wake.set()

    @property
    def busy(self) -> bool:
        """Whether an attempt is in flight (a drain waits for it, up to its deadline)."""
        return bool(self._in_flight)

    async def close(self) -> None:
        """Stop looking; attempts still in flight are cancelled and their leases released."""
        self._draining = True
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        cut = dict(self._in_flight)
        for task in cut:
            task.cancel()
        await asyncio.gather(*cut, return_exceptions=True)
        unfinished = [job for task, job in cut.items() if task.cancelled()]
        if unfinished:
            try:
                released = await self._store.release_deliveries(unfinished)
            except Exception:
                log.exception("could not release %d webhook deliveries; they are retried after their leases",
                              len(unfinished))
            else:
                log.info("released %d webhook deliveries still in flight: due again for any replica", released)
        await self._client.aclose()

    async def _run(self) -> None:
        while not self._draining:
            self._wake.clear()
            try:
                # A read first: every end wakes the sender, and most runs have no webhook.
                # Leasing (a write transaction) only when something is due.
                if (await self._until_next_due()) == 0:
                    await self.send_due()
                sleep = await self._until_next_due()
            except Exception:  # a passing store failure must not end the sender
                log.exception("the webhook sender could not read the outbox")
                sleep = POLL_SECONDS
            if sleep > 0:
                try:
                    await asyncio.wait_for(self._wake.wait(), sleep)
                except TimeoutError:
                    pass

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._in_flight.pop(task, None)

    async def _until_next_due(self) -> float:
        due = await self._store.next_delivery_due()
        if due is None:
            return POLL_SECONDS
        return min(POLL_SECONDS, max(0.0, due - self._clock()))

    async def send_due(self) -> None:
        """Lease what is due and start an attempt for each; returns once they are started."""
        while not self._draining:
            jobs = await self._store.claim_deliveries(
                self._clock(), self._timeout + LEASE_MARGIN_SECONDS, CLAIM_BATCH)
            for job in jobs:
                task = asyncio.create_task(self._attempt(job))
                self._in_flight[task] = job
                task.add_done_callback(self._forget)
            if len(jobs) < CLAIM_BATCH:
                return

    async def _attempt(self, job: DeliveryJob) -> None:
        started_at = self._clock()
        started = time.perf_counter()
        status: int | None = None
        error: str | None = None
        excerpt: str | None = None
        try:
            request = self._client.build_request(
                "POST", job.url, content=job.payload.encode(),
                headers=headers(job.webhook_id, job.payload, job.secret, started_at))
        except (httpx.InvalidURL, ValueError) as unbuildable:  # IDNA refusals are UnicodeErrors
            await self._record(job, started_at, started, None, unbuildable_error(unbuildable), None)
            return
        try:
            async with asyncio.timeout(self._timeout):
                response = await self._client.send(request, stream=True)
                try:
                    status = response.status_code
                    excerpt = await _excerpt(response)
                finally:
                    await response.aclose()
        except TimeoutError:
            error = f"no answer within {self._timeout:g} s"
        except httpx.HTTPError as failure:
            error = f"{type(failure).__name__}: {failure}"[:RESPONSE_EXCERPT]
        except RefusedAddress as refused:
            error = f"refused, not sent: {refused}"[:RESPONSE_EXCERPT]
        await self._record(job, started_at, started, status, error, excerpt)

    async def _record(self, job: DeliveryJob, started_at: float, started: float, status: int | None,
                      error: str | None, excerpt: str | None) -> None:
        """Store one attempt's outcome: delivered, pending with its next time, or failed."""
        duration_ms = (time.perf_counter() - started) * 1000
        attempts = [*job.attempts, attempt_record(rfc3339(started_at), duration_ms, status, error, excerpt)]
        delivered = status is not None and 200 <= status < 300
        self._metrics.webhook_attempts.labels("ok" if delivered else ("http_error" if status else "network_error")).inc()
        next_at: float | None = None
        if delivered:
            state = "delivered"
        elif len(attempts) >= self._max_attempts:
            state = "failed"
        else:
            state = "pending"
            next_at = self._clock() + retry_delay(len(attempts), self._backoff, self._rng)
        try:
            kept = await self._store.record_attempt(job, attempts, state, status, next_at)
        except Exception:
            log.exception("could not record an attempt of webhook %s; it is retried after its lease", job.webhook_id)
            return
        if not kept:
            log.warning("webhook %s: the lease ran out before its attempt was recorded", job.webhook_id)
            return
        if state != "pending":
            self._metrics.webhook_deliveries.labels(state).inc()
        if state == "failed":
            log.warning("webhook %s failed after %d attempts", job.webhook_id, len(attempts))


def unbuildable_error(failure: Exception) -> str:
    """The error of an attempt whose request could not be built from the stored URL (one kept
    from before today's checks at creation): recorded like any failed attempt, so the delivery
    reaches ``failed`` after the maximum attempts instead of being leased again forever."""
    return f"no request could be built for webhook.url: {type(failure).__name__}: {failure}"[:RESPONSE_EXCERPT]


async def _excerpt(response: httpx.Response) -> str | None:
    """The first characters of an answer's body, reading no more of it than that."""
    collected = b""
    async for piece in response.aiter_raw():
        collected += piece
        if len(collected) >= RESPONSE_EXCERPT * 4:
            break
    text = collected.decode("utf-8", "replace")[:RESPONSE_EXCERPT]
    return text or None
