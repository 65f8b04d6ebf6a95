"""What the service's answers mean to the clients: a status worth another try, a refusal, a model.

Every request's answer goes through :func:`check` (a 429/502/503/504 raised as
:class:`_Retryable`, so that tenacity tries again) and then one of the readers a request is
built with (:func:`decode` into a wire model, raising a refusal as :class:`LastwordAPIError`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import httpx
from pydantic import BaseModel

from lastword.client.errors import LastwordAPIError
from lastword.client.retry import RETRIED_STATUSES
from lastword.schemas import ToolResult


M = TypeVar("M", bound=BaseModel)


class _Retryable(Exception):
    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"{response.status_code} from {response.request.url}")
        self.response = response


def check(response: httpx.Response) -> httpx.Response:
    """``response``, unless its status asks for another try (then raised as :class:`_Retryable`)."""
    if response.status_code in RETRIED_STATUSES:
        raise _Retryable(response)
    return response


def raise_for_problem(response: httpx.Response) -> None:
    """Raise a non-2xx answer as :class:`LastwordAPIError` (its problem document, or its text)."""
    if response.is_error:
        try:
            problem = response.json()
        except ValueError:
            problem = None
        if not isinstance(problem, dict):
            problem = {"detail": response.text}
        raise LastwordAPIError(response.status_code, problem)


def decode(response: httpx.Response, model: type[M]) -> M:
    """A 2xx answer's body as ``model``; a refusal raised."""
    raise_for_problem(response)
    return model.model_validate(response.json())


def _decoder(model: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: decode(response, model)


def _tool_result_or_none(response: httpx.Response) -> ToolResult | None:
    return None if response.status_code == 202 else decode(response, ToolResult)


def _text(response: httpx.Response) -> str:
    raise_for_problem(response)
    return response.text
