"""One wire format for every error: {"error": {"code", "message", "details"}} (MemoClaw's).

The errors themselves are defined in app/core/errors.py; every exception that reaches Litestar is
rendered here, so clients (the memoclaw SDK included) always read the same shape.
"""

from __future__ import annotations

import logging
from typing import Any, TypeAlias

from litestar import MediaType, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from app.ai.facts import FactModelError
from app.core.errors import ApiError, PartUnavailable, ReplayedResponse, error_body
from app.db.errors import DATABASE_DOWN
from app.http.params import AnyRequest
from app.infra.instance_state import StoreUnavailable

log = logging.getLogger("engram.errors")

# Handlers see every request, whatever its user and state.
ErrorResponse: TypeAlias = Response[dict[str, Any]]

# Contract codes by HTTP status (docs/api-contract.md, "Errors"); the others are Engram's own.
CODE_BY_STATUS = {
    400: "VALIDATION_ERROR",
    401: "UNAUTHORIZED",
    402: "PAYMENT_REQUIRED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "VALIDATION_ERROR",
    429: "RATE_LIMIT_EXCEEDED",
    500: "INTERNAL_ERROR",
    503: "SERVICE_UNAVAILABLE",
}


def _render(
    status: int, code: str, message: str, details: Any, headers: dict[str, str]
) -> ErrorResponse:
    return Response(
        content=error_body(code, message, details),
        status_code=status,
        media_type=MediaType.JSON,
        headers=headers,
    )


def handle_api_error(_: AnyRequest, exc: ApiError) -> ErrorResponse:
    if exc.body is not None:
        return Response(
            content=exc.body, status_code=exc.status_code, media_type=MediaType.JSON,
            headers=exc.headers,
        )  # fmt: skip
    return _render(exc.status_code, exc.code, exc.message, exc.details, exc.headers)


def handle_replayed_response(_: AnyRequest, exc: ReplayedResponse) -> Response[bytes]:
    return Response(
        content=exc.body, status_code=exc.status_code, media_type=MediaType.JSON,
        headers=exc.headers,
    )  # fmt: skip


def _validation_details(exc: ValidationException) -> dict[str, Any]:
    extra = exc.extra
    if isinstance(extra, list):
        return {"errors": extra}
    if isinstance(extra, dict):
        return extra
    return {}


def handle_http_exception(_: AnyRequest, exc: HTTPException) -> ErrorResponse:
    if isinstance(exc, ValidationException) or exc.status_code == 400:
        # Litestar answers 400 for body/parameter validation and for malformed JSON; the
        # contract has one code for bad input, VALIDATION_ERROR, and it is a 422.
        details = _validation_details(exc) if isinstance(exc, ValidationException) else {}
        return _render(422, "VALIDATION_ERROR", _clean_detail(exc.detail), details, {})
    status = exc.status_code
    if status >= 500:
        log.error("server error: %s", exc, exc_info=exc)
    code = CODE_BY_STATUS.get(status, "INTERNAL_ERROR" if status >= 500 else "BAD_REQUEST")
    return _render(status, code, _clean_detail(exc.detail), {}, dict(exc.headers or {}))


def handle_fact_model_error(_: AnyRequest, exc: FactModelError) -> ErrorResponse:
    log.warning("language model failed: %s", exc)
    return _render(
        503, "SERVICE_UNAVAILABLE",
        f"The language model behind this call failed: {exc}. Nothing was stored; retry later.",
        {"tokens_used": exc.tokens_used, "attempts": exc.attempts}, {"Retry-After": "5"},
    )  # fmt: skip


def handle_database_down(request: AnyRequest, exc: Exception) -> ErrorResponse:
    log.warning("database unavailable: %r", exc)
    return handle_api_error(request, PartUnavailable("database"))


def handle_store_unavailable(request: AnyRequest, exc: StoreUnavailable) -> ErrorResponse:
    log.warning("shared store unavailable: %s", exc)
    return handle_api_error(request, PartUnavailable("redis"))


def handle_unexpected(_: AnyRequest, exc: Exception) -> ErrorResponse:
    log.exception("unhandled error", exc_info=exc)
    return _render(
        HTTP_500_INTERNAL_SERVER_ERROR, "INTERNAL_ERROR", "Internal server error", {}, {}
    )


def handle_exception_group(request: AnyRequest, exc: ExceptionGroup[Exception]) -> Response[Any]:
    """A dependency whose cleanup turned the handler's error into an API error (the request
    transaction answers a connection lost mid-statement with a 503) reaches here wrapped by
    Litestar in an ExceptionGroup: the answer is the first API error in it, or a 500."""
    for inner in exc.exceptions:
        if isinstance(inner, ExceptionGroup):
            return handle_exception_group(request, inner)
        if isinstance(inner, ReplayedResponse):
            return handle_replayed_response(request, inner)
        if isinstance(inner, ApiError):
            return handle_api_error(request, inner)
        if isinstance(inner, DATABASE_DOWN):
            return handle_database_down(request, inner)
    return handle_unexpected(request, exc)


def _clean_detail(detail: str) -> str:
    return detail or "Request failed"


EXCEPTION_HANDLERS = {
    ReplayedResponse: handle_replayed_response,
    ApiError: handle_api_error,
    FactModelError: handle_fact_model_error,
    HTTPException: handle_http_exception,
    StoreUnavailable: handle_store_unavailable,
    **dict.fromkeys(DATABASE_DOWN, handle_database_down),
    ExceptionGroup: handle_exception_group,
    Exception: handle_unexpected,
}
