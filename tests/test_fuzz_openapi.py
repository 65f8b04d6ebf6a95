"""Schema-driven fuzzing: schemathesis sends what ``openapi/openapi.json`` allows (and what it
does not) to a real server, and every answer must match the document.

Checks: no 5xx, every status code declared for its operation, the declared content type, the
body valid against the declared schema, declared headers, ``Allow`` on 405, schema-invalid input
refused, schema-valid input not refused as malformed. A stateful pass then follows the links
schemathesis infers between operations (a created run's ``runId`` fed to the others), so
requests reach runs that exist instead of answering 404.

Left out on purpose: the two SSE endpoints (an open stream never ends, so a generic client would
wait for ever; ``tests/test_streams.py`` covers them), and the Durable Streams operations under
``/ds`` (SPEC §17): their answers are that protocol's, which its own conformance suite checks
against a real server (``tests/test_durable_streams.py``), live reads included. ``?wait=`` is capped at 0.2 s by the
server's configuration so a generated wait cannot stall the run.

Examples are derandomised (a fixed seed per operation), so CI sees the same cases every time;
``LASTWORD_FUZZ_RANDOM=1`` draws new ones, ``LASTWORD_FUZZ_EXAMPLES`` raises the count and
``LASTWORD_SHRINK=1`` shrinks a failure to a small example (slow: it replays it many times).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from lastword.ingest.json_input import MAX_EXACT_INT, MIN_EXACT_INT
from lastword.openapi import DOCUMENT
from schemathesis.checks import CHECKS

from tests.api_helpers import serving
from tests.conftest import BACKENDS

#: NDJSON is declared as a string (one event per line); send the generated string as is.
schemathesis.serializer.alias("application/x-ndjson", "text/plain")

SCHEMA = schemathesis.openapi.from_path(DOCUMENT).exclude(path_regex=r"/stream$|^/ds/")
SCHEMA.config.output.sanitization.update(enabled=False)  # token counts are data here, not secrets

EXAMPLES = int(os.environ.get("LASTWORD_FUZZ_EXAMPLES", "25"))
DERANDOMIZE = os.environ.get("LASTWORD_FUZZ_RANDOM") != "1"
#: Shrinking replays a failure many times against the server: opt in with LASTWORD_SHRINK=1.
PHASES = [Phase.explicit, Phase.generate] + ([Phase.shrink] if os.environ.get("LASTWORD_SHRINK") == "1" else [])
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=DERANDOMIZE,
    phases=PHASES,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
)
#: Per request; a generated request that stalls the service fails instead of hanging the suite.
REQUEST_TIMEOUT = 10.0


def _check(name: str) -> Any:
    return CHECKS.get_by_names([name])[0]


def excluded_checks(case: Any) -> list[Any]:
    """Checks that cannot hold for this case because the document cannot say enough.

    "Schema-valid input is accepted" is skipped for two inputs no JSON Schema can describe: a
    cursor is opaque (no schema can say "one this service gave out", so a foreign cursor gets a
    declared 400), and an NDJSON body is declared as a string (OpenAPI 3.1 has no schema for
    "one JSON event per line", so a generated string that is not such lines gets a declared 400
    or 422), and a fork's ``afterSeq`` (no schema can know how long the parent's log is, so a
    boundary past its end gets a declared 422). A provider stream (``…/ingest/{format}``) is
    declared as bare objects: the providers' own event schemas and their order
    (``message_start`` first, …) are theirs to document, so a generated body gets a declared 422.
    Everything else is still checked for those cases. The same goes for a body holding
    an integer outside [-2**63, 2**64 - 1] anywhere (metadata, an error, a block's own field): it
    is refused with a declared 422 rather than changed, and free-form values have no schema
    that could say so.
    """
    if (case.operation.label in ("GET /v1/runs", "POST /v1/runs/{runId}/ingest/{format}")
            or case.media_type == "application/x-ndjson"
            or _holds_inexact_integer(getattr(case, "body", None))):
        return [_check("positive_data_acceptance")]
    if case.operation.label == "POST /v1/runs" and isinstance(case.body, dict) and case.body.get("forkOf"):
        return [_check("positive_data_acceptance")]
    return []


def _holds_inexact_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return not MIN_EXACT_INT <= value <= MAX_EXACT_INT
    if isinstance(value, dict):
        return any(_holds_inexact_integer(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_inexact_integer(item) for item in value)
    return False


#: The server guards every operation the document marks so: requests carry the ingest token
#: (good for reads too), and schemathesis checks that a missing or wrong one is refused.
TOKEN = "fuzz-ingest-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SERVER_SETTINGS: dict[str, Any] = {"max_wait_seconds": 0.2, "max_body_bytes": 1024 * 1024, "ingest_token": TOKEN}


@pytest.fixture(scope="module", params=BACKENDS)
def fuzz_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def fuzz_url(fuzz_backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server per backend for the module; long-polls are capped so none stalls a case."""
    with serving(fuzz_backend, tmp_path_factory, **SERVER_SETTINGS) as url:
        yield url


@SCHEMA.parametrize()
@FUZZ_SETTINGS
def test_every_answer_matches_the_document(case: Any, fuzz_url: str) -> None:
    """Any request the document describes (and many it forbids) gets a declared, conforming answer, never a 5xx."""
    case.call_and_validate(base_url=fuzz_url, timeout=REQUEST_TIMEOUT, headers=AUTH,
                           excluded_checks=excluded_checks(case))


class _Workflow(SCHEMA.as_state_machine()):  # type: ignore[misc]
    """Each scenario gets a server on a fresh database.

    A scenario's requests depend on earlier answers (links), so a database shared between
    scenarios would make the same drawn steps meet other answers the next time (a run id chosen
    by an earlier scenario already exists), which hypothesis rightly calls flaky generation.
    """

    backend = "sqlite"
    tmp_path_factory: pytest.TempPathFactory

    def setup(self) -> None:
        super().setup()
        self._servers = contextlib.ExitStack()
        self.base_url = self._servers.enter_context(serving(self.backend, self.tmp_path_factory, **SERVER_SETTINGS))

    def teardown(self) -> None:
        self._servers.close()
        super().teardown()

    def get_call_kwargs(self, case: Any) -> dict[str, Any]:
        return {"base_url": self.base_url, "timeout": REQUEST_TIMEOUT, "headers": AUTH}

    def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
        __tracebackhide__ = True
        case.validate_response(
            response, transport_kwargs=kwargs, recorder=self.recorder, excluded_checks=excluded_checks(case),
        )


def test_linked_sequences_match_the_document(fuzz_backend: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Sequences that create a run and then use it (events, chunks, end, turns, reads) all answer as documented."""
    workflow: Any = type("Workflow", (_Workflow,), {"backend": fuzz_backend, "tmp_path_factory": tmp_path_factory})
    workflow.run(settings=settings(FUZZ_SETTINGS, max_examples=max(EXAMPLES // 2, 5), stateful_step_count=8))
