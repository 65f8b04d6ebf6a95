"""docs/RUNNING.md's configuration table and the settings class list the same variables and defaults."""

import re
from pathlib import Path

from lastword.settings import Settings

README = Path(__file__).resolve().parent.parent / "docs" / "RUNNING.md"
ROW = re.compile(r"^\| `(LASTWORD_[A-Z_]+)` \| (.*?) \|", re.MULTILINE)


def _documented() -> dict[str, str]:
    section = README.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return {name: default.strip().strip("`") for name, default in ROW.findall(section)}


def _shown(value: object) -> str:
    if value is None or value == "":
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()  # as the variable is written: LASTWORD_…=true
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_every_setting_is_in_the_readme_with_its_default() -> None:
    """Each LASTWORD_ variable of Settings has a README row showing its real default, and no row is extra."""
    defaults = {
        f"LASTWORD_{name.upper()}": _shown(field.get_default(call_default_factory=True))
        for name, field in Settings.model_fields.items()
    }
    assert _documented() == defaults
