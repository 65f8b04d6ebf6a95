"""What SQLite's driver does that the rest of the store must not see: its errors, and the values
it would store that PostgreSQL cannot.

The same bad input gets the same answer on both backends: PostgreSQL refuses a value
its columns cannot hold (a NUL character in a text, a number past ``BIGINT``) with a
``DataError`` that :func:`lastword.store.postgres.store.driver_error` makes 422
``unstorable_value``; SQLite would store the NUL, so :class:`SqliteTx` refuses it first, and
:func:`driver_error` gives its own value errors the same 422. Anything else the driver raises
is the store failing, not the client: 503.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from lastword.errors import LastwordError, Unavailable, UnstorableValue
from lastword.store.sql.tx import Tx

#: Errors of a value the client sent, not of the store (``OverflowError``: an int past 64 bits).
VALUE_ERRORS = (sqlite3.DataError, OverflowError)


def driver_error(error: BaseException) -> LastwordError:
    """The one mapping of what SQLite (or its driver) raised to what the client is told."""
    if isinstance(error, LastwordError):
        return error
    if isinstance(error, VALUE_ERRORS):
        return UnstorableValue(f"the store refused a value: {error}")
    return Unavailable(f"the SQLite store failed: {error}")


def is_driver_error(error: BaseException) -> bool:
    """Whether ``error`` came from SQLite or its driver (anything else is a bug, answered as one)."""
    return isinstance(error, (sqlite3.Error, *VALUE_ERRORS))


def refuse_nul(params: Sequence[Any]) -> Sequence[Any]:
    for value in params:
        if type(value) is str and "\x00" in value:
            # PostgreSQL cannot hold it: refused here too, so both backends answer alike.
            raise UnstorableValue("the store refused a value: a text holds a NUL character (U+0000)")
    return params


class SqliteTx(Tx):
    """A transaction on SQLite that refuses the text values PostgreSQL would refuse."""

    def _execute(self, sql: str, params: Sequence[Any]) -> None:
        self.cursor.execute(sql, refuse_nul(params))

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.flush()
        self.cursor.executemany(self._convert(sql), _checked(rows))


def _checked(rows: Iterable[Sequence[Any]]) -> Iterator[Sequence[Any]]:
    for row in rows:
        yield refuse_nul(row)
