"""The words a command that goes on after a problem prints for it (lastword.cli.reasons)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lastword.cli.reasons import reason


def raised(action: object) -> BaseException:
    with pytest.raises(Exception) as caught:
        action()  # type: ignore[operator]
    return caught.value


def test_each_kind_of_failure_is_said_in_words_without_its_class(tmp_path: Path) -> None:
    missing = tmp_path / "t.jsonl"
    assert reason(raised(missing.read_bytes)) == f"{missing}: no such file or directory"
    assert reason(raised(lambda: subprocess.run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.2))) \
        == "no answer within 0.2 s"
    assert reason(raised(lambda: json.loads("{\n  nope"))) == \
        "not valid JSON (Expecting property name enclosed in double quotes at line 2 column 3)"
    assert reason(raised(lambda: b"ok \xff".decode())) == "not valid UTF-8 (byte 0xff at offset 3)"
    assert reason(TimeoutError("timed out")) == "timed out"
    assert reason(ValueError("the hook's input names no session_id")) == "the hook's input names no session_id"
    assert reason(RuntimeError()) == "failed without a message"
