"""Request input checked before anything decodes it: query strings free of NUL; bodies' JSON
media type, nesting depth and the C stack.

PostgreSQL text cannot hold U+0000: a body's structs refuse it as they are decoded
(app/core/schemas.py), and every query string is refused here, before any parameter is parsed.

A body sent with an explicit content type other than JSON (`text/plain`, a form) is refused with
415: Litestar would otherwise decode it as JSON all the same. The console's form posts are the
exception: their handlers say so (`opt=takes_form()`) and take url-encoded bodies only. A body
with no content type is read as JSON, as before (lenient for hand-written clients).

msgspec (and the stdlib json module) guard their recursion with Python's recursion limit, but
`py_ecc`, imported through eth-account and x402, raises that limit to 100,000 at import time, so
a body nested 25,000 deep overflows the C stack and kills the process before any check runs.
Two defences, either of which holds alone:

- `BoundedRequest.body()` measures the nesting depth of every JSON body before Litestar hands it
  to a decoder, and refuses one deeper than `MAX_JSON_DEPTH` with a 422 (msgspec refuses
  bytes that are not UTF-8 as it decodes); the /mcp mount runs the same bound, and a UTF-8
  check, on what it reads (`check_json_body`, app/mcp/http.py);
- `restore_recursion_limit()` puts the interpreter's limit back once the app's imports are done.
"""

from __future__ import annotations

import sys
from typing import Any

from litestar import Request

from app.core.errors import InvalidInput, UnsupportedMediaType
from app.core.json_input import UnreadableJson, check_depth, check_utf8
from app.core.schemas import NulCharacter

# Deepest JSON body accepted. The contract allows metadata 3 levels deep (docs/api-contract.md,
# "Limits"); an import body wraps memories in 2 more. 64 leaves room for any real client
# and stays far below what the C stack holds.
MAX_JSON_DEPTH = 64

# CPython's own default: enough for the app, and the decoders' guards trip long before the C
# stack is at risk.
RECURSION_LIMIT = 1000


def check_json_depth(body: bytes) -> None:
    """The depth bound, as the 422 a REST route answers."""
    try:
        check_depth(body, MAX_JSON_DEPTH)
    except UnreadableJson as exc:
        raise InvalidInput(
            f"JSON body nested deeper than {MAX_JSON_DEPTH} levels", {"max_depth": MAX_JSON_DEPTH}
        ) from exc


def check_json_body(body: bytes) -> None:
    """The depth bound, then UTF-8, for a mount whose decoder does not check UTF-8 as a JSON
    error (the MCP transport's json.loads raises UnicodeDecodeError). REST routes need only the
    depth bound: msgspec refuses bytes that are not UTF-8 as it decodes, so they are not read
    twice (a 64 MiB import)."""
    check_json_depth(body)
    try:
        check_utf8(body)
    except UnreadableJson as exc:
        raise InvalidInput(f"Invalid JSON body: {exc}") from exc


def is_json_media_type(content_type: str) -> bool:
    """application/json, or a structured `+json` type (application/problem+json, ...)."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def check_json_media_type(content_type: str | None) -> None:
    if content_type and not is_json_media_type(content_type):
        raise UnsupportedMediaType(
            f"Request bodies are JSON: send content-type application/json, not {content_type!r}",
            {"content_type": content_type},
        )


class BoundedRequest(Request[Any, Any, Any]):
    """Litestar's request, with the media type and the JSON depth bound checked once on the raw
    body, before any decoder (json(), msgspec structs, DTOs: all of them read body() first)
    sees it."""

    _body_checked = False

    async def body(self) -> bytes:
        body = await super().body()
        if not self._body_checked and body:
            if not self._form_allowed():
                check_json_media_type(self.headers.get("content-type"))
                check_json_depth(body)
            self._body_checked = True
        return body

    def _form_allowed(self) -> bool:
        """A form, sent to a route that takes one (the console's: `opt=takes_form()`)."""
        content_type = (self.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
        handler = self.scope.get("route_handler")
        opt = getattr(handler, "opt", None) or {}
        return content_type == FORM_MEDIA_TYPE and bool(opt.get(FORM_OPT))


FORM_MEDIA_TYPE = "application/x-www-form-urlencoded"
FORM_OPT = "takes_form"


def takes_form() -> dict[str, Any]:
    """Handler `opt` for a route whose body is an HTML form (url-encoded), not JSON."""
    return {FORM_OPT: True}


def check_query_string(request: Request[Any, Any, Any]) -> None:
    """A 422 for a NUL anywhere in the query string (names and values, as decoded)."""
    for name, value in request.query_params.multi_items():
        if "\x00" in name or "\x00" in value:
            raise NulCharacter(f"$.query.{name}")


def restore_recursion_limit() -> None:
    """Undo py_ecc's `sys.setrecursionlimit(100000)` (call after every import that may load it)."""
    if sys.getrecursionlimit() > RECURSION_LIMIT:
        sys.setrecursionlimit(RECURSION_LIMIT)
