"""What went wrong, said for the person reading a command's standard error.

A command that must not fail (the Claude Code hook, the transcript and export recovery of
``lastword run``) reports a problem and goes on; its line should say what happened and to what,
not which Python class was raised: "FileNotFoundError: [Errno 2] …" tells a user of the command
less than "/tmp/t.jsonl: no such file or directory".
"""

from __future__ import annotations

import json
import subprocess


def reason(error: BaseException) -> str:
    """``error`` in words: the operating system's message and the file it concerns, a time-out's
    limit, a decoding failure's place, otherwise the error's own message."""
    if isinstance(error, subprocess.TimeoutExpired):
        return f"no answer within {round(error.timeout, 1):g} s"
    if isinstance(error, TimeoutError) and not error.strerror:
        return "timed out"
    if isinstance(error, OSError) and error.strerror:
        said = error.strerror[:1].lower() + error.strerror[1:]
        return f"{error.filename}: {said}" if error.filename is not None else said
    if isinstance(error, json.JSONDecodeError):
        return f"not valid JSON ({error.msg} at line {error.lineno} column {error.colno})"
    if isinstance(error, UnicodeDecodeError):
        return f"not valid UTF-8 (byte {error.object[error.start]:#04x} at offset {error.start})"
    return str(error) or "failed without a message"
