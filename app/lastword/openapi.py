"""Write the OpenAPI document generated from the app: ``python -m lastword.openapi``.

``openapi/openapi.json`` is checked in and a test fails when it drifts from the app; run this
command after changing an endpoint and commit the result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lastword.main import create_app
from lastword.settings import Settings

DOCUMENT = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def generate() -> dict[str, Any]:
    # Settings are fixed so the document never depends on the machine's environment.
    return create_app(Settings(_env_file=None, database_url="sqlite:///:memory:")).openapi()


def render() -> str:
    return json.dumps(generate(), indent=2, sort_keys=True) + "\n"


def main() -> int:
    DOCUMENT.parent.mkdir(exist_ok=True)
    DOCUMENT.write_text(render())
    print(f"wrote {DOCUMENT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
