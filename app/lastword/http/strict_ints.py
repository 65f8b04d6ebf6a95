"""Integers in resume ids, cursors and query parameters, read strictly: plain ASCII digits.

Python's ``int()`` (and pydantic's lax integers) also read ``3_0`` as 30, ``+3``, `` 3``, ``3.0``
and other scripts' digits. An id or a cursor spelled any such way is none this service gave
out, so it is refused rather than read as a neighbouring one (``Last-Event-ID: 3_0`` resumed
from 30).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BeforeValidator

_DIGITS = re.compile(r"[0-9]{1,19}")


def parse_decimal(text: str) -> int | None:
    """``text`` as a non-negative decimal integer of at most 19 ASCII digits, else None."""
    return int(text) if _DIGITS.fullmatch(text) else None


def _decimal_query(value: Any) -> Any:
    if isinstance(value, str) and parse_decimal(value) is None:
        raise ValueError("must be written as plain decimal digits")
    return value


#: For a query integer: ``Annotated[int, Query(...), DecimalDigits]`` (after ``Query``, so
#: FastAPI keeps its bounds in the OpenAPI schema).
DecimalDigits = BeforeValidator(_decimal_query)
