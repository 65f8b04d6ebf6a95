"""Run identifiers: client-chosen ones are checked, service-made ones sort by creation time."""

from __future__ import annotations

import os
import re
import time

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"
_RUN_ID = re.compile(RUN_ID_PATTERN)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def is_valid_run_id(value: str) -> bool:
    return _RUN_ID.match(value) is not None


def new_run_id(now: float | None = None) -> str:
    """A ULID-shaped id (48-bit milliseconds, 80 random bits, Crockford base32).

    Ids made in later milliseconds sort after earlier ones, so a listing by id reads in
    creation order; the random part makes collisions between replicas negligible.
    """
    millis = int((time.time() if now is None else now) * 1000)
    value = (millis << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        chars.append(_CROCKFORD[value & 31])
        value >>= 5
    return "".join(reversed(chars))
