"""The flags that make each known agent CLI print the JSON lines ``lastword run`` reads (SPEC §16).

Without them a CLI prints its answer as prose and ``lastword run`` could read none of it
(``claude -p`` without ``--output-format stream-json --verbose``, ``codex exec`` without
``--json``, ``opencode run`` without ``--format json``). So ``lastword run`` adds what is missing
to the command line of a CLI it knows (by the command's name, ``FORMATS_BY_COMMAND``) and says
so on standard error in one line; an output format the CLI was given that lastword cannot read
(``--output-format text``, ``--format default``) is replaced.

Only the headless subcommands are touched (``claude -p/--print``, ``codex exec``/``e``,
``opencode run``): an interactive session prints no lines to read, and is left as it is. Flags
go right after the command's name or subcommand, before any ``--``, so no prompt is mistaken for
one of their values.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from lastword.adapters import FORMATS_BY_COMMAND


@dataclass(frozen=True)
class JsonFlags:
    """How one CLI is asked for its JSON lines."""

    #: The headless subcommands (empty: the flags go after the command's name, if ``headless``
    #: flags say it runs headless).
    subcommands: frozenset[str]
    #: Flags any of which means a headless run (for a CLI without a subcommand for it).
    headless: frozenset[str]
    #: The option naming the output format, and the value lastword reads.
    option: str
    value: str | None
    #: Flags that must be there too.
    also: tuple[str, ...] = ()


#: By ingest format: the one place of this rule (a test checks every CLI format has an entry).
JSON_FLAGS = {
    "claude-code": JsonFlags(frozenset(), frozenset({"-p", "--print"}), "--output-format", "stream-json", ("--verbose",)),
    "codex": JsonFlags(frozenset({"exec", "e"}), frozenset(), "--json", None),
    "opencode": JsonFlags(frozenset({"run"}), frozenset(), "--format", "json"),
}


def with_json_flags(command: Sequence[str], format: str) -> tuple[list[str], str | None]:
    """``command`` with its CLI's JSON-output flags, and the line that says what was changed
    (None: nothing was)."""
    argv = list(command)
    name = os.path.basename(argv[0]) if argv else ""
    flags = JSON_FLAGS.get(format)
    if flags is None or FORMATS_BY_COMMAND.get(name) != format:
        return argv, None  # not the CLI itself (a wrapper, a script): its lines are its own
    end = argv.index("--") if "--" in argv else len(argv)
    if flags.subcommands:
        at = next((index for index in range(1, end) if argv[index] in flags.subcommands), None)
        if at is None:
            return argv, None
        at += 1
    else:
        if not any(arg in flags.headless for arg in argv[1:end]):
            return argv, None
        at = 1
    added: list[str] = []
    replaced: list[str] = []
    given = _value_of(argv, flags.option, end)
    if given is None:
        added += [flags.option] if flags.value is None else [flags.option, flags.value]
    elif flags.value is not None and given[1] != flags.value:
        index, old = given
        replaced.append(f"{flags.option} {old}".rstrip())
        if argv[index].startswith(flags.option + "="):
            argv[index] = f"{flags.option}={flags.value}"
        elif old == "":
            argv.insert(index + 1, flags.value)  # given without its value
        else:
            argv[index + 1] = flags.value
    added += [flag for flag in flags.also if flag not in argv[1:end]]
    if not added and not replaced:
        return argv, None
    argv[at:at] = added
    words = []
    if added:
        words.append(f"added {' '.join(added)}")
    if replaced:
        words.append(f"replaced {', '.join(replaced)} by {flags.option} {flags.value}")
    return argv, f"{name}'s command line: {'; '.join(words)} (lastword reads its JSON lines)"


def _value_of(argv: list[str], option: str, end: int) -> tuple[int, str] | None:
    """Where ``option`` is given before ``end`` and its value (``""`` for a flag without one)."""
    for index in range(1, end):
        arg = argv[index]
        if arg == option:
            value = argv[index + 1] if index + 1 < end and not argv[index + 1].startswith("-") else ""
            return index, value
        if arg.startswith(option + "="):
            return index, arg.split("=", 1)[1]
    return None


__all__ = ["JSON_FLAGS", "JsonFlags", "with_json_flags"]
