"""The checked-in OpenAPI document matches the app."""

from lastword.openapi import DOCUMENT, render


def test_openapi_document_has_not_drifted() -> None:
    """openapi/openapi.json is what the app generates (regenerate: python -m lastword.openapi)."""
    assert DOCUMENT.read_text() == render(), "openapi/openapi.json is stale: run `python -m lastword.openapi`"
