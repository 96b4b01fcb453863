"""Engram's errors, defined apart from their rendering (app/http/errors.py renders them as
{"error": {"code", "message", "details"}}, MemoClaw's wire shape).

Services and repositories raise these; none of them knows HTTP beyond the status a contract code
stands for. Named subclasses say what went wrong (`MemoryNotFound`), so no caller builds an
error's message by hand.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from msgspec import Struct

# How long a client should wait before trying again when a part is down.
OUTAGE_RETRY_AFTER_SECONDS = 5


class ApiError(Exception):
    """An error with a contract code (docs/api-contract.md, "Errors")."""

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


class Forbidden(ApiError):
    status_code = 403
    code = "FORBIDDEN"


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


class PartUnavailable(ServiceUnavailable):
    """A part Engram needs (the database, Redis) is down: 503 with Retry-After."""

    def __init__(self, part: str) -> None:
        super().__init__(
            f"{part} is unavailable; nothing was changed or charged, retry shortly",
            {"unavailable": part},
            {"Retry-After": str(OUTAGE_RETRY_AFTER_SECONDS)},
        )


class ErrorDetail(Struct):
    code: str  # the contract's code (ApiError.code)
    message: str
    details: dict[str, Any]


class ErrorBody(Struct):
    """Every error's wire shape, as error_body() builds it (declared for the OpenAPI document)."""

    error: ErrorDetail


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


# ---- memories ----------------------------------------------------------------------------------


class MemoryNotFound(NotFound):
    """No memory with this id in the caller's wallet (another wallet's memory is not found)."""

    def __init__(self, memory_id: object, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"Memory {memory_id} not found", details)
        self.memory_id = memory_id


class TargetMemoryNotFound(NotFound):
    """A relation's target is not among the caller's memories."""

    def __init__(self, memory_id: object) -> None:
        super().__init__(f"Target memory {memory_id} not found", {"field": "target_id"})
        self.memory_id = memory_id


class MemoryImmutable(Conflict):
    """The memory was stored immutable: it cannot be changed or deleted."""

    def __init__(self, memory_id: object, action: str) -> None:
        super().__init__(f"Memory {memory_id} is immutable and cannot be {action}")
        self.memory_id = memory_id


class PreconditionFailed(ApiError):
    status_code = 412
    code = "PRECONDITION_FAILED"


class VersionConflict(PreconditionFailed):
    """The memory changed since the version the writer read: it is at `current`."""

    def __init__(self, memory_id: object, expected: int, current: int) -> None:
        super().__init__(
            f"Memory {memory_id} is at version {current}, not {expected}",
            {"id": str(memory_id), "expected_version": expected, "current_version": current},
            headers={"ETag": f'"{current}"'},
        )
        self.current = current


class KeyTaken(Conflict):
    """Another live memory holds this key in that namespace."""

    def __init__(self, key: str, namespace: str) -> None:
        super().__init__(
            f"Another memory holds the key {key!r} in namespace {namespace!r}",
            {"key": key, "namespace": namespace},
        )


class MemoryNotDeleted(Conflict):
    """A restore of a memory that is not deleted."""

    def __init__(self, memory_id: object) -> None:
        super().__init__(f"Memory {memory_id} is not deleted")
        self.memory_id = memory_id


class RelationExists(Conflict):
    """The same relation (source, target, type) is already there."""

    def __init__(self, source_id: object, relation_type: str, target_id: object,
                 existing_id: object | None) -> None:  # fmt: skip
        super().__init__(
            f"Memory {source_id} is already {relation_type} memory {target_id}",
            {"relation_id": str(existing_id) if existing_id is not None else None},
        )


class RelationNotFound(NotFound):
    def __init__(self, relation_id: object, memory_id: object) -> None:
        super().__init__(f"Relation {relation_id} of memory {memory_id} not found")


# ---- agent keys --------------------------------------------------------------------------------


class PublicUrlUnset(ServiceUnavailable):
    """A server reachable beyond this machine that was not told the origin clients reach it at:
    a delegation could name no origin of its own, so none registers until the operator sets
    ENGRAM_PUBLIC_URL."""

    def __init__(self, host: str) -> None:
        super().__init__(
            f"Agent keys need ENGRAM_PUBLIC_URL on a server listening on {host} (not loopback):"
            " the operator sets it to the origin clients reach Engram at, which every"
            " delegation's Server line names",
            {"reason": "public_url_unset", "setting": "ENGRAM_PUBLIC_URL"},
        )


class DelegationNotNewer(Conflict):
    """A delegation signed no later than one the owner already registered to the agent: an
    older body never replaces a newer one."""

    def __init__(self, issued_at: str, newest: str) -> None:
        super().__init__(
            f"This delegation was issued at {issued_at}, not after the owner's newest one to this"
            f" agent ({newest}): the owner signs a new one",
            {"field": "issued_at", "newest_issued_at": newest},
        )


class DelegationCancelled(Conflict):
    """The owner cancelled this delegation's nonce: the signed body never registers."""

    def __init__(self, nonce: str) -> None:
        super().__init__(
            f"The owner cancelled the delegation with nonce {nonce}", {"field": "nonce"}
        )


# ---- control flow ------------------------------------------------------------------------------


class ReplayedResponse(Exception):
    """Answer with a response stored earlier (an idempotent replay of a settled payment)."""

    def __init__(self, status_code: int, body: bytes, headers: dict[str, str]) -> None:
        super().__init__("replayed response")
        self.status_code = status_code
        self.body = body
        self.headers = headers


def id_or_not_found(raw: str, what: str) -> UUID:
    """A path's id as a UUID; one that is no UUID names nothing: 404, like an unknown one."""
    try:
        return UUID(raw)
    except ValueError:
        raise NotFound(f"{what} {raw} not found") from None


class MemoryRefused(ApiError):
    """The namespace refuses memories the store-time classifier flags (its guard is `refuse`):
    nothing of the request was stored."""

    status_code = 422
    code = "MEMORY_REFUSED"

    def __init__(self, namespace: str, flags: list[dict[str, str]], field: str = "") -> None:
        rules = ", ".join(sorted({f["rule"] for f in flags}))
        super().__init__(
            f"Namespace {namespace!r} refuses instruction-like content ({rules}); nothing was"
            " stored",
            {"field": f"{field}content", "namespace": namespace, "flags": flags},
        )
