"""OpenTelemetry spans (SPEC §15), received by a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import gzip
import json
import queue
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from lastword.cli.demo import run_scenario
from lastword.telemetry import enabled
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
    GenAiOperationNameValues,
    GenAiProviderNameValues,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.servers import ServerProcess, free_port

pytestmark = pytest.mark.slow
SPAN_WAIT = 30.0


class Receiver:
    """An OTLP/HTTP trace receiver: every span it is sent lands in ``spans``, with its resource."""

    def __init__(self) -> None:
        self.spans: queue.Queue[tuple[dict[str, Any], Span]] = queue.Queue()
        self.port = free_port()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server convention
                body = self.rfile.read(int(self.headers["content-length"]))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    resource = attributes_of(resource_spans.resource.attributes)
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            receiver.spans.put((resource, span))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def take(self, count: int) -> list[tuple[dict[str, Any], Span]]:
        return [self.spans.get(timeout=SPAN_WAIT) for _ in range(count)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def value_of(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [value_of(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def attributes_of(attributes: Any) -> dict[str, Any]:
    return {item.key: value_of(item.value) for item in attributes}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    yield receiver
    receiver.close()


def serve(tmp_path: Path, receiver_port: int, **env: str) -> ServerProcess:
    return ServerProcess({
        "LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lastword.db'}",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver_port}",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
        **env,
    }, tmp_path).start()


def test_max_tokens_span_carries_the_partial_answer_not_the_empty_message(tmp_path: Path, receiver: Receiver) -> None:
    """The max-tokens-partial child's span: finish reason max_tokens, error status, the partial text."""
    server = serve(tmp_path, receiver.port, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
    try:
        run_id = run_scenario("max-tokens-partial", server.url)
        result = httpx.get(f"{server.url}/v1/runs/{run_id}/result").json()
        [(resource, span)] = receiver.take(1)
    finally:
        server.stop()
    attributes = attributes_of(span.attributes)
    assert resource["service.name"] == "lastword"
    assert span.name == "invoke_agent demo:max-tokens-partial"
    assert span.kind == Span.SPAN_KIND_CLIENT
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.provider.name"] == "lastword"
    assert attributes["gen_ai.agent.name"] == "demo:max-tokens-partial"
    assert attributes["gen_ai.agent.id"] == run_id
    assert attributes["gen_ai.conversation.id"] == run_id
    assert attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert attributes["error.type"] == "max_tokens"
    assert span.status.code == Status.STATUS_CODE_ERROR
    assert "max_tokens" in span.status.message
    # Usage sums every message of the turn, the empty usage-only one included.
    assert attributes["gen_ai.usage.input_tokens"] == 2600
    assert attributes["gen_ai.usage.output_tokens"] == 4181
    [message] = json.loads(attributes["gen_ai.output.messages"])
    assert message["role"] == "assistant"
    assert message["finish_reason"] == "length"
    assert all(set(part) >= {"type", "content"} for part in message["parts"] if part["type"] == "text")
    texts = [part["content"] for part in message["parts"] if part["type"] == "text"]
    assert texts == [block["text"] for block in result["output"] if block["type"] == "text"]
    assert texts == ["Found three call sites of parse_config; two pass a path, one passes a dict."]
    assert span.end_time_unix_nano > span.start_time_unix_nano


def test_content_is_not_captured_unless_switched_on(tmp_path: Path, receiver: Receiver) -> None:
    """Without the capture variable the span has no output messages; a completed turn is not an error."""
    server = serve(tmp_path, receiver.port)
    try:
        run_scenario("completed", server.url)
        [(_, span)] = receiver.take(1)
    finally:
        server.stop()
    attributes = attributes_of(span.attributes)
    assert "gen_ai.output.messages" not in attributes
    assert "error.type" not in attributes
    assert attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert span.status.code != Status.STATUS_CODE_ERROR


def test_a_parent_and_three_children_form_one_trace(tmp_path: Path, receiver: Receiver) -> None:
    """Children's spans hang under the parent's turn span, in the parent's trace, whatever ends first."""
    server = serve(tmp_path, receiver.port)
    try:
        with httpx.Client(base_url=server.url) as http:
            http.post("/v1/runs", json={"runId": "lead", "agent": "lead"}).raise_for_status()
            for name in ("kid-1", "kid-2", "kid-3"):
                http.post("/v1/runs", json={"runId": name, "parentRunId": "lead", "agent": "helper"}).raise_for_status()
            for name, reason in (("kid-1", "end_turn"), ("kid-2", "cancelled"), ("kid-3", "max_tokens")):
                http.post(f"/v1/runs/{name}/end", json={"stopReason": reason}).raise_for_status()
            http.post("/v1/runs/lead/end", json={"stopReason": "end_turn"}).raise_for_status()
        spans = {attributes_of(span.attributes)["gen_ai.agent.id"]: span for _, span in receiver.take(4)}
    finally:
        server.stop()
    lead = spans["lead"]
    assert lead.parent_span_id == b""
    for name in ("kid-1", "kid-2", "kid-3"):
        assert spans[name].trace_id == lead.trace_id
        assert spans[name].parent_span_id == lead.span_id
    assert len({span.span_id for span in spans.values()}) == 4


def test_a_traceparent_in_metadata_joins_the_callers_trace(tmp_path: Path, receiver: Receiver) -> None:
    """A run created with metadata.traceparent is a child of that span, and so are its children."""
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    server = serve(tmp_path, receiver.port)
    try:
        with httpx.Client(base_url=server.url) as http:
            http.post("/v1/runs", json={"runId": "root", "metadata": {
                "traceparent": f"00-{trace_id}-{span_id}-01"}}).raise_for_status()
            http.post("/v1/runs", json={"runId": "leaf", "parentRunId": "root"}).raise_for_status()
            http.post("/v1/runs/leaf/end", json={"stopReason": "end_turn"}).raise_for_status()
            http.post("/v1/runs/root/end", json={"stopReason": "end_turn"}).raise_for_status()
        spans = {attributes_of(span.attributes)["gen_ai.agent.id"]: span for _, span in receiver.take(2)}
    finally:
        server.stop()
    assert spans["root"].trace_id.hex() == trace_id
    assert spans["root"].parent_span_id.hex() == span_id
    assert spans["leaf"].trace_id.hex() == trace_id
    assert spans["leaf"].parent_span_id == spans["root"].span_id


def test_a_dead_collector_never_affects_ingest(tmp_path: Path) -> None:
    """With the endpoint refusing connections, runs are created, fed and ended as always."""
    server = ServerProcess({
        "LASTWORD_DATABASE_URL": f"sqlite:///{tmp_path / 'lastword.db'}",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "OTEL_BSP_SCHEDULE_DELAY": "20",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "1",
    }, tmp_path).start()
    try:
        run_ids = [run_scenario("completed", server.url) for _ in range(5)]
        with httpx.Client(base_url=server.url) as http:
            results = [http.get(f"/v1/runs/{run_id}/result").json() for run_id in run_ids]
    finally:
        server.stop()
    assert [result["stopReason"] for result in results] == ["completed"] * 5
    assert server.process is not None and server.process.returncode in (0, -15)


def test_tracing_is_off_unless_an_endpoint_is_set() -> None:
    """The OTEL_* variables decide: an endpoint turns it on; none, or the SDK disabled, keeps it off."""
    assert not enabled({})
    assert enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert enabled({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert not enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert not enabled({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"})


def test_legacy_conventions_keep_the_spans_as_they_were(tmp_path: Path, receiver: Receiver) -> None:
    """LASTWORD_OTEL_GENAI_CONVENTIONS=legacy: an internal span, lastword's stop reason as the
    finish reason, no provider; a run's metadata.provider is named by the 0.1.0 spans only."""
    server = serve(tmp_path, receiver.port, LASTWORD_OTEL_GENAI_CONVENTIONS="legacy",
                   OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
    try:
        run_scenario("max-tokens-partial", server.url)
        [(_, span)] = receiver.take(1)
    finally:
        server.stop()
    attributes = attributes_of(span.attributes)
    assert span.kind == Span.SPAN_KIND_INTERNAL
    assert attributes["gen_ai.response.finish_reasons"] == ["max_tokens"]
    assert json.loads(attributes["gen_ai.output.messages"])[0]["finish_reason"] == "max_tokens"
    assert "gen_ai.provider.name" not in attributes


def registry_names() -> dict[str, str]:
    """The GenAI attribute names of the conventions' registry as the OpenTelemetry semantic
    conventions package lists them, each with its note (``Replaced by …`` for a renamed one)."""
    source = Path(gen_ai_attributes.__file__).read_text()
    return {name: note for name, note in re.findall(r'^GEN_AI_\w+: Final = "([^"]+)"\n"""\n(.*?)"""', source,
                                                     re.MULTILINE | re.DOTALL)}


def test_every_gen_ai_attribute_is_a_current_registry_name(tmp_path: Path, receiver: Receiver) -> None:
    """Each gen_ai.* attribute a span carries is in the conventions' registry and not one it
    replaced; the operation name is a registry value, and the provider comes from metadata."""
    server = serve(tmp_path, receiver.port, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
    try:
        with httpx.Client(base_url=server.url) as http:
            http.post("/v1/runs", json={"runId": "named", "agent": "coder",
                                        "metadata": {"provider": "anthropic"}}).raise_for_status()
            http.post("/v1/runs/named/events", json=[
                {"type": "assistant/message", "message": {"content": [{"type": "text", "text": "done"}],
                                                          "usage": {"inputTokens": 3, "outputTokens": 2,
                                                                    "cacheReadTokens": 1, "cacheWriteTokens": 1}}},
                {"type": "turn/end", "stopReason": "refusal"}]).raise_for_status()
        [(_, span)] = receiver.take(1)
    finally:
        server.stop()
    attributes = attributes_of(span.attributes)
    registry = registry_names()
    emitted = sorted(name for name in attributes if name.startswith("gen_ai."))
    assert emitted and all(name in registry for name in emitted), set(emitted) - set(registry)
    assert [name for name in emitted if "Replaced by" in registry[name]] == []
    assert attributes["gen_ai.operation.name"] == GenAiOperationNameValues.INVOKE_AGENT.value
    assert attributes["gen_ai.provider.name"] == GenAiProviderNameValues.ANTHROPIC.value
    assert attributes["gen_ai.response.finish_reasons"] == ["content_filter"]
