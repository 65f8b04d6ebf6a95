"""Writers for failover tests and benches: threads appending one chunk per request through
lastword replicas, each retried with its eventId until acknowledged, as a client does."""

from __future__ import annotations

import threading
import time
from collections import Counter

import httpx

WRITERS = 4


class Writers:
    """Threads appending one chunk per request, each retried with its eventId until acknowledged."""

    def __init__(self, urls: list[str], run_id: str) -> None:
        self.urls = urls
        self.run_id = run_id
        self.acknowledged: list[str] = []
        self.acknowledged_at: list[float] = []
        #: The replica (its URL) that acknowledged each event, in the order of ``acknowledged``.
        self.acknowledged_by: list[str] = []
        self.answers: Counter[int] = Counter()
        #: The ``code`` of each 503's problem body; and requests that got no answer at all.
        self.codes: Counter[str] = Counter()
        self.unanswered: Counter[str] = Counter()
        self.unexpected: list[str] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._write, args=(n,), daemon=True) for n in range(WRITERS)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def count(self) -> int:
        with self.lock:
            return len(self.acknowledged)

    def _write(self, number: int) -> None:
        sequence = 0
        with httpx.Client(timeout=20) as client:
            while not self.stop.is_set():
                event_id = f"w{number}-{sequence}"
                url = f"{self.urls[sequence % len(self.urls)]}/v1/runs/{self.run_id}/events"
                body = {"type": "assistant/chunk", "eventId": event_id, "delta": {"type": "text", "text": "x"}}
                while not self.stop.is_set():
                    try:
                        response = client.post(url, json=body)
                    except httpx.TransportError as error:
                        with self.lock:
                            self.unanswered[type(error).__name__] += 1
                        continue  # the replica's connection died with the request: send it again
                    with self.lock:
                        self.answers[response.status_code] += 1
                    if response.status_code == 200:
                        with self.lock:
                            self.acknowledged.append(event_id)
                            self.acknowledged_at.append(time.monotonic())
                            self.acknowledged_by.append(self.urls[sequence % len(self.urls)])
                        break
                    if response.status_code == 503:
                        with self.lock:
                            self.codes[_code(response)] += 1
                    if response.status_code != 503 or "retry-after" not in response.headers:
                        with self.lock:
                            self.unexpected.append(f"{response.status_code} {response.text[:300]}")
                    self.stop.wait(float(response.headers.get("retry-after", "1")) / 4)
                sequence += 1

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def _code(response: httpx.Response) -> str:
    try:
        return str(response.json().get("code"))
    except ValueError:
        return f"(not JSON) {response.text[:80]}"


def out_of_order(logged_ids: list[str]) -> list[str]:
    """The writers whose events are not in the log in the order each sent them (each writer's
    next event is sent once the one before is acknowledged, so the log must keep that order)."""
    last: dict[str, int] = {}
    wrong: list[str] = []
    for event_id in logged_ids:
        writer, _, number = event_id.rpartition("-")
        if int(number) <= last.get(writer, -1):
            wrong.append(event_id)
        last[writer] = int(number)
    return wrong


def pause_after(acknowledged_at: list[float], killed_at: float) -> float:
    """Seconds from ``killed_at`` to the first acknowledgement of a request sent after it (one
    in flight at the kill may still have been acknowledged by the old primary just after); when
    every acknowledgement came sooner than that (a failover under half a second), the first."""
    later = [at for at in acknowledged_at if at > killed_at + 0.5] or [at for at in acknowledged_at if at > killed_at]
    return min(later) - killed_at
