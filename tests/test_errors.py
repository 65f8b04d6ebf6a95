"""Every problem code is a class in lastword.errors, and docs/ERRORS.md lists each with its status."""

from __future__ import annotations

import re
from pathlib import Path

from lastword.errors import DsRefusal, HttpError, LastwordError, every_error_class, problem_document

ROOT = Path(__file__).resolve().parent.parent
ROW = re.compile(r"^\| `([a-z0-9_]+)` \| (\d{3}|4xx) \|", re.MULTILINE)


def documented() -> dict[str, str]:
    return dict(ROW.findall((ROOT / "docs" / "ERRORS.md").read_text()))


def test_every_code_of_the_hierarchy_is_documented_with_its_status() -> None:
    """A class whose code docs/ERRORS.md lacks, or lists with another status, fails here."""
    listed = documented()
    for cls in every_error_class():
        assert cls.code in listed, f"{cls.__name__}: code {cls.code!r} is missing from docs/ERRORS.md"
        # A Durable Streams refusal's status is the one its face answers its reason with.
        expected = "4xx" if issubclass(cls, (HttpError, DsRefusal)) else str(cls.status)
        assert listed[cls.code] == expected, f"{cls.code}: docs say {listed[cls.code]}, the class {expected}"


def test_every_documented_code_exists() -> None:
    codes = {cls.code for cls in every_error_class()}
    assert set(documented()) <= codes, set(documented()) - codes


def test_no_code_is_named_outside_the_hierarchy() -> None:
    """Codes come from classes: no other module passes ``code=`` or writes a problem's ``"code"``."""
    offenders = []
    for path in sorted((ROOT / "app" / "lastword").rglob("*.py")):
        if path.name == "errors.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bcode=\"|[\"']code[\"']\s*:|problems/", line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_a_problem_document_carries_the_class_code_status_and_extras() -> None:
    for cls in every_error_class():
        if cls is HttpError:
            error: LastwordError = HttpError("x", status=418)
        elif cls is DsRefusal:
            error = DsRefusal("gone", "went wrong")
        else:
            error = cls("went wrong", runId="r")
        body = problem_document(error)
        assert body["code"] == cls.code and body["type"].endswith("/" + cls.code)
        assert body["status"] == error.http_status and body["detail"] in ("x", "went wrong")
        if cls not in (HttpError, DsRefusal):
            assert body["runId"] == "r"
    assert problem_document(DsRefusal("gone", "deleted"), 410)["status"] == 410
    assert isinstance(problem_document(LastwordError("boom"))["title"], str)
