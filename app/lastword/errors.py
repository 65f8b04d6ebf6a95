"""The service's own errors, one class per problem ``code``, and the one problem-document builder.

Every failure a client can cause or see is one of these; routes never see a driver's exception
type, and every ``application/problem+json`` answer (routes, access control, the server's own
early answers) is :func:`problem_document` of one of them. A class fixes its ``code`` and ``status``;
raising code adds only the ``detail`` and extra members. ``docs/ERRORS.md`` lists every code
(tests/test_errors.py fails when a class here is missing there).

The categories (a client may branch on them with ``except``)::

    LastwordError                 500  any failure with a problem document
    ├── BadRequest                400  malformed input, bad cursor or resume id
    ├── Unauthorized              401  no token, or a token that is not valid here
    ├── Forbidden                 403  a read token where the ingest token is needed, a
    │                                  cross-site write, a host /mcp does not serve
    ├── NotFound                  404  unknown run or turn, unknown path
    ├── MethodNotAllowed          405
    ├── RequestTimeout            408  request headers too slow
    ├── Conflict                  409  idempotency clash, wrong run state
    ├── Gone                      410  a run deleted by retention
    ├── PayloadTooLarge           413
    ├── UnsupportedMedia          415
    ├── Unprocessable             422  schema violations, unknown stop reason
    ├── HeadersTooLarge           431
    ├── HttpError                 4xx  any other HTTP-level refusal (status set per instance)
    └── Unavailable               503  the store or the notice connection cannot be reached,
                                       or the replica is draining
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import orjson

PROBLEM_JSON = "application/problem+json"
PROBLEM_TYPE_BASE = "https://lastword.dev/problems/"


class LastwordError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"
    title: ClassVar[str] = "Internal error"
    #: Seconds a client should wait before it tries again (a ``Retry-After`` header), if any.
    retry_after: ClassVar[int | None] = None

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra

    @property
    def http_status(self) -> int:
        return self.status

    def problem(self) -> dict[str, Any]:
        return problem_document(self)


def problem_document(error: LastwordError, status: int | None = None) -> dict[str, Any]:
    """The RFC 9457 problem document of ``error``: the only place one is built. ``status`` is
    the one a face answers with where it is not the error's own (a Durable Streams refusal's)."""
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + error.code,
        "title": error.title,
        "status": error.http_status if status is None else status,
        "code": error.code,
        "detail": error.detail,
    }
    body.update(error.extra)
    return body


def problem_json(error: LastwordError, status: int | None = None) -> bytes:
    """:func:`problem_document` encoded, for transports that write bytes."""
    return orjson.dumps(problem_document(error, status))


# -- 400 -------------------------------------------------------------------------------


class BadRequest(LastwordError):
    status, code, title = 400, "bad_request", "Bad request"


class MalformedJson(BadRequest):
    code = "malformed_json"


class InvalidUtf8(BadRequest):
    code = "invalid_utf8"


class InvalidGzip(BadRequest):
    code = "invalid_gzip"


class TooDeeplyNested(BadRequest):
    code = "too_deeply_nested"


class InvalidIdempotencyKey(BadRequest):
    code = "invalid_idempotency_key"


class InvalidCursor(BadRequest):
    code = "invalid_cursor"


class InvalidLastEventId(BadRequest):
    code = "invalid_last_event_id"


class MalformedRequest(BadRequest):
    code = "malformed_request"


# -- 401, 403 --------------------------------------------------------------------------


class Unauthorized(LastwordError):
    status, code, title = 401, "unauthorized", "Unauthorized"


class MissingToken(Unauthorized):
    code = "missing_token"


class InvalidToken(Unauthorized):
    code = "invalid_token"


class Forbidden(LastwordError):
    status, code, title = 403, "forbidden", "Forbidden"


class WrongTokenKind(Forbidden):
    code = "wrong_token_kind"


class CrossOrigin(Forbidden):
    code = "cross_origin"


class HostNotAllowed(Forbidden):
    code = "host_not_allowed"


# -- 404, 405, 408, 410 ----------------------------------------------------------------


class NotFound(LastwordError):
    status, code, title = 404, "not_found", "Not found"


class RunNotFound(NotFound):
    code = "run_not_found"


class TurnNotFound(NotFound):
    code = "turn_not_found"


class ForkParentNotFound(NotFound):
    code = "fork_parent_not_found"


class MethodNotAllowed(LastwordError):
    status, code, title = 405, "method_not_allowed", "Method not allowed"


class RequestTimeout(LastwordError):
    status, code, title = 408, "header_timeout", "Request header timeout"


class BodyTimeout(RequestTimeout):
    code, title = "body_timeout", "Request body timeout"


class Gone(LastwordError):
    status, code, title = 410, "run_deleted", "Gone"


class RunDeleted(Gone):
    pass


# -- 409 -------------------------------------------------------------------------------


class Conflict(LastwordError):
    status, code, title = 409, "conflict", "Conflict"


class RunExists(Conflict):
    code = "run_exists"


class EventIdConflict(Conflict):
    code = "event_id_conflict"


class RunEnded(Conflict):
    code, title = "run_ended", "The turn has ended"


class TurnAlreadyEnded(Conflict):
    code = "turn_already_ended"


class NotContinuable(Conflict):
    code = "not_continuable"


class RunRunning(Conflict):
    code = "run_running"


# -- 413, 415, 422, 431 ----------------------------------------------------------------


class PayloadTooLarge(LastwordError):
    status, code, title = 413, "payload_too_large", "Payload too large"


class BatchTooLarge(PayloadTooLarge):
    code = "batch_too_large"


class EventTooLarge(PayloadTooLarge):
    code = "event_too_large"


class LineTooLarge(PayloadTooLarge):
    code = "line_too_large"


class UnsupportedMedia(LastwordError):
    status, code, title = 415, "unsupported_media_type", "Unsupported media type"


class UnsupportedCharset(UnsupportedMedia):
    code = "unsupported_charset"


class UnsupportedEncoding(UnsupportedMedia):
    code = "unsupported_content_encoding"


class Unprocessable(LastwordError):
    status, code, title = 422, "validation_error", "Invalid input"


class InvalidEvent(Unprocessable):
    code = "invalid_event"


class InvalidProviderEvent(Unprocessable):
    code = "invalid_provider_event"


class EmptyBatch(Unprocessable):
    code = "empty_batch"


class NumberOutOfRange(Unprocessable):
    code = "number_out_of_range"


class UnstorableValue(Unprocessable):
    code = "unstorable_value"


class InvalidWebhook(Unprocessable):
    code = "invalid_webhook"


class ForkAfterSeqOutOfRange(Unprocessable):
    code = "fork_after_seq_out_of_range"


class HeadersTooLarge(LastwordError):
    status, code, title = 431, "headers_too_large", "Request headers too large"


class HttpError(LastwordError):
    """An HTTP-level refusal the framework made that no class above names (its own status)."""

    status, code, title = 400, "http_error", "HTTP error"

    def __init__(self, detail: str, *, status: int, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self._status = status

    @property
    def http_status(self) -> int:
        return self._status


#: Why the Durable Streams protocol refuses a request (SPEC §17). Transport-neutral: the
#: Durable Streams face (:mod:`lastword.http.ds`) alone answers each with its status and headers.
DsReason = Literal["invalid", "stale_epoch", "not_found", "not_deletable", "conflict", "closed", "gone", "too_large"]


class DsRefusal(LastwordError):
    """A refusal of the Durable Streams protocol: why (``reason``) and the facts its clients act
    on (``expected_seq`` and ``received_seq`` for a producer's gap, ``epoch`` for a stale one,
    ``tail`` for a closed stream). The protocol's clients read the status and headers a face
    makes of them, not a ``code``: one class serves all of its refusals."""

    status, code, title = 400, "durable_streams", "Refused by the Durable Streams protocol"

    def __init__(self, reason: DsReason, detail: str, *, expected_seq: int | None = None,
                 received_seq: int | None = None, epoch: int | None = None, tail: int | None = None,
                 **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.reason = reason
        self.expected_seq = expected_seq
        self.received_seq = received_seq
        self.epoch = epoch
        self.tail = tail


# -- 500, 503 --------------------------------------------------------------------------


class Unavailable(LastwordError):
    """The store cannot serve now (it is down, or a failover is under way): a client sends the
    same request again after ``Retry-After``, and eventIds make that store nothing twice."""

    status, code, title = 503, "store_unavailable", "Store unavailable"
    retry_after = 1


class Unreachable(Unavailable):
    """The store could not be reached at all (no connection in time, or each attempt's lost):
    another write tried now would wait as long and fail the same way."""


class NoticesUnavailable(Unavailable):
    code = "notices_unavailable"


class Draining(Unavailable):
    """The replica is shutting down (SPEC §18): ready elsewhere, or here after its restart."""

    code, title = "draining", "Draining"
    retry_after = 1


def every_error_class() -> list[type[LastwordError]]:
    """The whole hierarchy, :class:`LastwordError` first (for the list in docs/ERRORS.md)."""
    found: list[type[LastwordError]] = [LastwordError]
    for cls in found:
        found.extend(sub for sub in cls.__subclasses__() if sub not in found)
    return found
