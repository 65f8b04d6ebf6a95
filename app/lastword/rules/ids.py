"""Run identifiers: client-chosen ones are checked, service-made ones sort by creation time."""

from __future__ import annotations

import os
import threading
import time

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_last_id = 0
_last_id_lock = threading.Lock()


def new_run_id(now: float | None = None) -> str:
    """A ULID-shaped id (48-bit milliseconds, 80 random bits, Crockford base32).

    Ids made later sort after earlier ones (within one process even in the same millisecond),
    so a listing by id reads in creation order; the random part makes collisions between
    replicas negligible.
    """
    global _last_id
    millis = int((time.time() if now is None else now) * 1000)
    value = (millis << 80) | int.from_bytes(os.urandom(10))
    with _last_id_lock:
        # Two ids in one millisecond (or after the clock stepped back) would sort at random:
        # step past the last one instead, as monotonic ULIDs do.
        value = _last_id = max(value, _last_id + 1)
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))
