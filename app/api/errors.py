"""One error hierarchy and one wire format: {"error": {"code", "message", "details"}} (MemoClaw's).

Every exception that reaches Litestar is rendered here, so clients (the memoclaw SDK included)
always read the same shape.
"""

from __future__ import annotations

import logging
from typing import Any, TypeAlias

import asyncpg
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from app.ai.facts import FactModelError
from app.shared.store import StoreUnavailable

log = logging.getLogger("engram.errors")

# Handlers see every request, whatever its user and state.
AnyRequest: TypeAlias = Request[Any, Any, Any]
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


class ApiError(Exception):
    """An error with a contract code; raise a subclass from services and controllers."""

    status_code = 500
    code = "INTERNAL_ERROR"

    def __init__(
        self,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}
        self.headers = headers or {}
        self.body = body  # a full body in the contract's shape, when more than `error` is sent


class Unauthorized(ApiError):
    status_code = 401
    code = "UNAUTHORIZED"


class PaymentRequired(ApiError):
    status_code = 402
    code = "PAYMENT_REQUIRED"


class NotFound(ApiError):
    status_code = 404
    code = "NOT_FOUND"


class Conflict(ApiError):
    status_code = 409
    code = "CONFLICT"


class InvalidInput(ApiError):
    status_code = 422
    code = "VALIDATION_ERROR"


class UnsupportedMediaType(ApiError):
    status_code = 415
    code = "UNSUPPORTED_MEDIA_TYPE"


class RateLimitExceeded(ApiError):
    status_code = 429
    code = "RATE_LIMIT_EXCEEDED"


class ServiceUnavailable(ApiError):
    status_code = 503
    code = "SERVICE_UNAVAILABLE"


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


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


class ReplayedResponse(Exception):
    """Answer with a response stored earlier (an idempotent replay of a settled payment)."""

    def __init__(self, status_code: int, body: bytes, headers: dict[str, str]) -> None:
        super().__init__("replayed response")
        self.status_code = status_code
        self.body = body
        self.headers = headers


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


# What a lost or refused PostgreSQL connection raises (asyncpg SQLSTATE classes 08, which holds
# "connection was closed in the middle of operation", and 57P; the socket's own errors when
# nothing listens). A part that is down is not a bug: 503 with Retry-After, never 500. (Not
# asyncpg's InterfaceError: its subclasses include DataError, bad input a 500 must reveal.)
DATABASE_DOWN: tuple[type[Exception], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.CannotConnectNowError,
    asyncpg.AdminShutdownError,
    asyncpg.CrashShutdownError,
    asyncpg.TooManyConnectionsError,
    ConnectionError,
)
# Taking a connection fails this way when the database is down: nothing listens (OSError), the
# connect timed out, or the server refuses (starting, shutting down, too many clients).
CONNECT_FAILURES: tuple[type[Exception], ...] = (OSError, TimeoutError, *DATABASE_DOWN)
# How long a client should wait before trying again when a part is down.
OUTAGE_RETRY_AFTER_SECONDS = 5


class PartUnavailable(ServiceUnavailable):
    """A part Engram needs (the database, Redis) is down: 503 with Retry-After."""

    def __init__(self, part: str) -> None:
        super().__init__(
            f"{part} is unavailable; nothing was changed or charged, retry shortly",
            {"unavailable": part},
            {"Retry-After": str(OUTAGE_RETRY_AFTER_SECONDS)},
        )


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


def _clean_detail(detail: str) -> str:
    return detail or "Request failed"


EXCEPTION_HANDLERS = {
    ReplayedResponse: handle_replayed_response,
    ApiError: handle_api_error,
    FactModelError: handle_fact_model_error,
    HTTPException: handle_http_exception,
    StoreUnavailable: handle_store_unavailable,
    **dict.fromkeys(DATABASE_DOWN, handle_database_down),
    Exception: handle_unexpected,
}
