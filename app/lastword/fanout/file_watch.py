"""A thread's wait that ends when a file in one directory is written, or when it is poked.

The ``--workers`` watcher (:mod:`lastword.fanout.data_version`) learns of another process's
commit only by looking. Looking often costs an idle server CPU for nothing; looking seldom
makes the first commit after a quiet spell late. The kernel knows when the database's files
are written: on Linux, inotify on the database's directory makes the idle watcher's wait end
at the write (a commit appends to the ``-wal`` file with ``write``; readers write nothing, the
``-shm`` index is written through a memory map, which inotify does not report). The directory
is watched rather than the files, so a ``-wal`` file that is removed and made again is still
seen. Where inotify is not to be had (another OS, a kernel without it, no watches left), the
wait is a plain timed one and the watcher keeps looking at its own pace.

A poke (this process committed, or the watcher is stopping) ends the wait from another
thread through a pipe, so one ``select`` waits for both.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import select
import sys
from typing import NamedTuple

log = logging.getLogger("lastword")

# <sys/inotify.h>: the events that mean a file in the directory was written or made.
_IN_MODIFY = 0x002
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_WRITTEN = _IN_MODIFY | _IN_MOVED_TO | _IN_CREATE
#: Bytes read at a time when the pending events are drained (their content is not needed).
_DRAIN = 64 * 1024


def _inotify(directory: str) -> int | None:
    """A non-blocking inotify descriptor watching ``directory`` for written files, or ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        init, add_watch = libc.inotify_init1, libc.inotify_add_watch
    except (OSError, AttributeError):
        return None
    add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
    fd: int = init(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        log.info("no inotify (%s): the workers look for each other's commits by polling", os.strerror(ctypes.get_errno()))
        return None
    if add_watch(fd, os.fsencode(directory), _WRITTEN) < 0:
        log.info("cannot watch %s (%s): the workers look for each other's commits by polling",
                 directory, os.strerror(ctypes.get_errno()))
        os.close(fd)
        return None
    return fd


def _drain(fd: int) -> bool:
    """Read all that is pending on ``fd``; whether there was any."""
    found = False
    with contextlib.suppress(BlockingIOError, InterruptedError):
        while os.read(fd, _DRAIN):
            found = True
    return found


class Woken(NamedTuple):
    """What happened since the last wait."""

    poked: bool
    written: bool


class FileWatch:
    """Waits for a write to a file in ``directory`` (when the kernel can tell) or a :meth:`poke`."""

    def __init__(self, directory: str) -> None:
        self._files = _inotify(directory)
        self._poke_read, self._poke_write = os.pipe()
        os.set_blocking(self._poke_read, False)
        os.set_blocking(self._poke_write, False)
        #: A poke is under way and not yet taken: further pokes need not write.
        self._poked = False

    @property
    def sees_writes(self) -> bool:
        """Whether :meth:`wait` ends at a write (else only at a poke or its timeout)."""
        return self._files is not None

    def poke(self) -> None:
        """End the wait under way, or the next one, at once. Any thread."""
        if not self._poked:
            self._poked = True
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._poke_write, b"!")

    def wait(self, timeout: float, *, writes: bool = True) -> Woken:
        """Return after ``timeout`` seconds, or sooner at a poke or (``writes``) a write seen;
        whether it was poked, and whether a file was written since the last wait (also when
        not waited for).

        Everything pending is taken, so the next wait waits for what comes after this one
        returns. A poke is taken
        before the look that follows it: the flag is cleared before the pipe is drained, so a
        poke either finds the flag set after its write was drained by this wait (and the look
        that follows sees its commit), or writes again for the next wait.
        """
        ready = [self._poke_read]
        if writes and self._files is not None:
            ready.append(self._files)
        with contextlib.suppress(InterruptedError):
            select.select(ready, [], [], timeout)
        self._poked = False
        poked = _drain(self._poke_read)
        # Also while not waited for: written files would pile up otherwise.
        return Woken(poked, self._files is not None and _drain(self._files))

    def close(self) -> None:
        for fd in (self._files, self._poke_read, self._poke_write):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._files = None
