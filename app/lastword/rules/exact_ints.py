"""The exact-integer rule, one for every way JSON comes in (``/events``, provider and CLI bodies,
the JSON a provider sends inside a string, such as a tool call's input).

orjson reads an integer outside [-2**63, 2**64 - 1] as a float, silently:
``18446744073709551617`` would be stored as ``1.8446744073709552e+19``. Blocks keep every field
exactly as sent (SPEC §3), and orjson cannot write such an integer back, so a value holding one
is refused (422 ``number_out_of_range``, naming where) rather than changed. Only text with a run
of 19 or more digits can hold one, and only such text is read a second time, with the standard
library's exact integers, to find where.

That second reading recurses, and Python's recursion limit is below orjson's 1,024 levels: text
nested too deeply for it is refused as ``too_deeply_nested``, the answer such nesting gets anyway
when it is stored (nothing deeper than 250 levels can be written back).
"""

from __future__ import annotations

import json
from typing import Any

from lastword.errors import NumberOutOfRange, TooDeeplyNested

#: The integers orjson reads and writes exactly.
MIN_EXACT_INT = -(2**63)
MAX_EXACT_INT = 2**64 - 1
#: Any integer outside that range is written with at least 19 digits.
LONG_RUN = 19
#: Every byte to a space, except the ASCII digits, which become ``0``: in the translated text a
#: run of 19 digits is a run of 19 zeros, found by a substring search. Both steps run in C over
#: the bytes, about ten times as fast as a regular expression, which tries a match at every
#: digit of the body (a fifth of a 1,000-event batch's CPU went to that search).
_DIGITS_AS_ZERO = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_ZEROS = b"0" * LONG_RUN


def may_hold_inexact(raw: bytes | str) -> bool:
    """Whether ``raw`` has a run of 19 ASCII digits (without one, every integer in it is exact)."""
    if isinstance(raw, str):
        # UTF-8 keeps the ASCII digits as they are and makes every other character bytes that
        # are not digits; "surrogatepass" lets a lone surrogate (valid in JSON text) through.
        raw = raw.encode(errors="surrogatepass")
    return _ZEROS in raw.translate(_DIGITS_AS_ZERO)


def first_inexact(raw: bytes | str, *, items: bool) -> tuple[int, str] | None:
    """Where the first integer orjson would change is in ``raw`` (JSON that orjson read).

    ``(0, path)`` for a value, ``(position, path)`` with ``items`` for an array's items; the
    path is ``.key`` and ``[n]`` steps from there (``""`` for the value itself); ``None`` when
    every integer is exact. Nesting too deep to read again is ``TooDeeplyNested``.
    """
    if not may_hold_inexact(raw):
        return None
    try:
        exact = json.loads(raw)  # orjson refused NaN and Infinity already: none is read here
    except RecursionError:
        raise TooDeeplyNested("the JSON nests too deeply to be read exactly or stored") from None
    for position, value in enumerate(exact if items else [exact]):
        path = _inexact_path(value)
        if path is not None:
            return position, path
    return None


def check_exact(raw: bytes | str, *, items: bool = False, first_index: int | None = None) -> None:
    """Refuse the first integer in ``raw`` (JSON that orjson read) that orjson changed.

    With ``items``, ``raw`` is an array whose items are events numbered from ``first_index``;
    without, ``raw`` is one value, the event ``first_index`` when that is given. The problem
    names the event's ``index`` and the ``field``'s path in it.
    """
    try:
        found = first_inexact(raw, items=items)
    except TooDeeplyNested as error:
        if first_index is not None and not items:
            error.extra["index"] = first_index
            error.detail = f"event {first_index} nests JSON too deeply to be read exactly or stored"
        raise
    if found is None:
        return
    offset, path = found
    field = path.removeprefix(".") or "body"
    if first_index is None:
        raise out_of_range(field, field=field)
    raise out_of_range(f"event {first_index + offset}: {field}", field=field, index=first_index + offset)


def out_of_range(where: str, **extra: Any) -> NumberOutOfRange:
    """The refusal of an integer that would not be kept; ``where`` names it for the reader."""
    return NumberOutOfRange(
        f"{where}: the integer is outside [-2**63, 2**64 - 1] and would not be kept exactly", **extra,
    )


def _inexact_path(root: Any) -> str | None:
    """The path of the first integer out of range in ``root``, depth first, in order."""
    pending: list[tuple[Any, str]] = [(root, "")]
    while pending:
        value, path = pending.pop()
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            if not MIN_EXACT_INT <= value <= MAX_EXACT_INT:
                return path
        elif isinstance(value, list):
            pending.extend((item, f"{path}[{at}]") for at, item in reversed(list(enumerate(value))))
        elif isinstance(value, dict):
            pending.extend((item, f"{path}.{key}") for key, item in reversed(list(value.items())))
    return None
