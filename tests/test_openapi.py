"""The checked-in OpenAPI document matches the app."""

from lastword.openapi import DOCUMENT, render


def test_openapi_document_has_not_drifted() -> None:
    """openapi/openapi.json is what the app generates (regenerate: python -m lastword.openapi)."""
    assert DOCUMENT.read_text() == render(), "openapi/openapi.json is stale: run `python -m lastword.openapi`"


# The generated document as documentation (what /docs shows a reader).

from typing import Any  # noqa: E402

import pytest  # noqa: E402
from lastword import schemas  # noqa: E402
from lastword.openapi import generate  # noqa: E402
from lastword.rules.events import IngestEvent  # noqa: E402
from lastword.rules.stop_reasons import WIRE_VALUES  # noqa: E402
from pydantic import BaseModel, TypeAdapter  # noqa: E402

METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return generate()


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method, path, operation) for path, item in document["paths"].items()
            for method, operation in item.items() if method in METHODS]


def test_tokens_are_security_schemes_and_their_refusals_are_listed(document: dict[str, Any]) -> None:
    """/docs can Authorize: a bearer scheme and the ?access_token= scheme; every guarded
    operation names them and lists 401, writes (POST; PUT and DELETE under /ds) also 403; probes are open."""
    schemes = document["components"]["securitySchemes"]
    assert schemes["bearerToken"] == {**schemes["bearerToken"], "type": "http", "scheme": "bearer"}
    assert schemes["accessTokenQuery"]["in"] == "query" and schemes["accessTokenQuery"]["name"] == "access_token"
    for method, path, operation in operations(document):
        if path in ("/healthz", "/livez", "/readyz"):
            assert operation["security"] == [], path
            continue
        names = {name for requirement in operation["security"] for name in requirement}
        assert "bearerToken" in names, (method, path)
        assert "401" in operation["responses"], (method, path)
        if method in ("post", "put", "delete"):
            assert names == {"bearerToken"}, (method, path)  # ingest refuses the query token
            assert "403" in operation["responses"], (method, path)
        else:
            assert "accessTokenQuery" in names, (method, path)


def test_every_error_is_a_problem_document(document: dict[str, Any]) -> None:
    """Every 4xx/5xx answer is declared as application/problem+json holding a Problem, with a
    description of what it means; FastAPI's own validation shape is not in the document."""
    for method, path, operation in operations(document):
        for status, response in operation["responses"].items():
            if int(status) >= 400:
                assert response["content"] == {"application/problem+json": {
                    "schema": {"$ref": "#/components/schemas/Problem"}}}, (method, path, status)
                assert response["description"] not in ("", "A problem document.", "Validation Error")
    assert "HTTPValidationError" not in document["components"]["schemas"]


def test_every_store_backed_operation_lists_503(document: dict[str, Any]) -> None:
    """Ingest (and every other /v1 operation) can answer 503 when the store is unreachable."""
    for method, path, operation in operations(document):
        if path.startswith("/v1/"):
            assert "503" in operation["responses"], (method, path)
    assert "503" in document["paths"]["/v1/runs/{runId}/events"]["post"]["responses"]


def test_every_schema_field_and_parameter_is_described(document: dict[str, Any]) -> None:
    """Each component schema, each of its properties and each parameter has a description."""
    missing = []
    for name, schema in document["components"]["schemas"].items():
        if not schema.get("description"):
            missing.append(name)
        missing += [f"{name}.{field}" for field, prop in schema.get("properties", {}).items()
                    if not prop.get("description")]
    for method, path, operation in operations(document):
        if not operation.get("description") and not operation.get("summary"):
            missing.append(f"{method} {path}")
        missing += [f"{method} {path} ?{parameter['name']}" for parameter in operation.get("parameters", [])
                    if not parameter.get("description")]
    assert missing == []


def test_stop_reason_is_an_enum_in_every_answer(document: dict[str, Any]) -> None:
    """An answer's stopReason is one of the seven wire values, declared as an enum."""
    schema = document["components"]["schemas"]["SubagentResult"]["properties"]["stopReason"]
    choices = [option for option in schema.get("anyOf", [schema]) if option.get("type") != "null"]
    assert [set(option["enum"]) for option in choices] == [set(WIRE_VALUES)]


MODELS: dict[str, type[BaseModel]] = {
    name: model for name, model in vars(schemas).items() if isinstance(model, type) and issubclass(model, BaseModel)
}


def _check_example(schema: dict[str, Any], example: Any, where: str) -> None:
    """The example is valid for the schema it illustrates (a model of ours, or the events)."""
    reference = schema.get("$ref") or schema.get("items", {}).get("$ref") or ""
    name = reference.rsplit("/", 1)[-1] or schema.get("title", "")  # some bodies are inlined
    if name in MODELS:
        model = MODELS[name]
        for item in example if "items" in schema else [example]:
            model.model_validate(item)
    elif "oneOf" in schema:  # an event or a batch of them
        TypeAdapter(list[IngestEvent]).validate_python(example if isinstance(example, list) else [example])
    elif schema.get("type") == "array":  # a provider's own events (SPEC §13): objects of its schema
        assert isinstance(example, list) and example and all(isinstance(item, dict) for item in example), where
    else:
        assert isinstance(example, str) and example, where


def test_every_operation_has_an_example_that_is_valid(document: dict[str, Any]) -> None:
    """Every operation shows an example answer (its body; for an answer without one, its
    headers), and every request body an example per media type; JSON examples validate against
    the schema they illustrate."""
    for method, path, operation in operations(document):
        where = f"{method} {path}"
        for media, content in operation.get("requestBody", {}).get("content", {}).items():
            assert "example" in content, f"{where} request {media}"
            if media == "application/json":
                _check_example(content["schema"], content["example"], where)
        shown = [(status, media, content) for status, response in operation["responses"].items()
                 if int(status) < 300 for media, content in response.get("content", {}).items()
                 if "example" in content]
        # An answer with no body (a Durable Streams write, SPEC §17) shows its headers instead.
        headers_shown = [name for status, response in operation["responses"].items() if int(status) < 300
                         and "content" not in response for name, header in response.get("headers", {}).items()
                         if header.get("example")]
        assert shown or headers_shown, f"{where}: no example answer"
        for status, media, content in shown:
            if media == "application/json":
                _check_example(content["schema"], content["example"], f"{where} {status}")


def test_sdk_users_are_told_to_stream_a_childs_turn_in_one_request(document: dict[str, Any]) -> None:
    """A parent SDK's user reads, on the ingest operation, how to send a child's turn (SPEC §19):
    one streamed request per turn (not one per message), closed in a ``finally``, and the turn
    ended when the answer has no stop reason."""
    operation = document["paths"]["/v1/runs/{runId}/ingest/{format}"]["post"]
    description = " ".join(operation["description"].split())
    for said in ("one streamed request", "not one request per message", 'duplex: "half"', "`finally`",
                 "An answer without `stopReason`", "POST /v1/runs/{runId}/end"):
        assert said in description, said
    ndjson = operation["requestBody"]["content"]["application/x-ndjson"]["schema"]["description"]
    assert "whole turn in one body" in ndjson
