"""The service's own errors, and their problem documents (RFC 9457).

Every failure a client can cause or see is one of these; routes never see a driver's
exception type. The tree::

    LastwordError                  any failure with a problem document
    ├── BadRequest          400    malformed JSON, invalid UTF-8, bad cursor
    ├── NotFound            404    unknown run or turn
    ├── Conflict            409    idempotency clash, wrong run state
    │   └── RunEnded        409    events for a turn that has ended
    ├── Gone                410    a run deleted by retention
    ├── PayloadTooLarge     413
    ├── UnsupportedMedia    415
    ├── Unprocessable       422    schema violations, unknown stop reason
    └── Unavailable         503    the store cannot be reached
"""

from __future__ import annotations

from typing import Any


class LastwordError(Exception):
    status = 500
    code = "internal_error"
    title = "Internal error"

    def __init__(self, detail: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        self.extra = extra

    def problem(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": f"https://lastword.dev/problems/{self.code}",
            "title": self.title,
            "status": self.status,
            "code": self.code,
            "detail": self.detail,
        }
        body.update(self.extra)
        return body


class BadRequest(LastwordError):
    status, code, title = 400, "bad_request", "Bad request"


class NotFound(LastwordError):
    status, code, title = 404, "not_found", "Not found"


class Conflict(LastwordError):
    status, code, title = 409, "conflict", "Conflict"


class RunEnded(Conflict):
    code, title = "run_ended", "The turn has ended"


class Gone(LastwordError):
    status, code, title = 410, "run_deleted", "Gone"


class PayloadTooLarge(LastwordError):
    status, code, title = 413, "payload_too_large", "Payload too large"


class UnsupportedMedia(LastwordError):
    status, code, title = 415, "unsupported_media_type", "Unsupported media type"


class Unprocessable(LastwordError):
    status, code, title = 422, "validation_error", "Invalid input"


class Unavailable(LastwordError):
    status, code, title = 503, "store_unavailable", "Store unavailable"
