"""JSON from outside, bounded before anything parses it: its nesting depth, its UTF-8 and, for
what arrives inside a header, its size.

Python's JSON decoders (the stdlib's, msgspec, pydantic's) recurse once per level, so a deep
enough document raises RecursionError, or (py_ecc raises the interpreter's limit at import)
overflows the C stack, before any validation runs: app/http/body.py. Every JSON the server reads,
bodies and the headers Engram decodes itself (SIGN-IN-WITH-X, PAYMENT-SIGNATURE, X-PAYMENT),
is measured here first; the caller turns a refusal into its own error (a 422, a 401, an x402
`invalid_payload`, a JSON-RPC parse error).
"""

from __future__ import annotations

import binascii
import json
import re
from typing import Any

import numpy as np

# A JSON string, escapes included (the unrolled form: linear, no backtracking).
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPENERS = b"[{"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_BASE64 = re.compile(r"^[A-Za-z0-9+/_-]*={0,2}$")


class UnreadableJson(ValueError):
    """JSON the server will not parse: too deep, too large, not UTF-8, or not JSON at all."""


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """Whether arrays and objects in `body` nest deeper than `limit`, brackets inside strings
    not counted.

    Exact for valid JSON. For invalid JSON the measured depth is at least the depth a decoder
    reaches before it finds the error (up to there the body is a valid prefix, in which strings
    pair the same way for both), so bounding it bounds the decoder."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # fewer openers than the limit: no need to look closer
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    if not brackets:
        return False
    codes = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((codes == _OPENERS[0]) | (codes == _OPENERS[1]), 1, -1).astype(np.int32)
    return int(np.cumsum(steps).max(initial=0)) > limit


def check_depth(document: bytes, max_depth: int) -> None:
    if json_depth_exceeds(document, max_depth):
        raise UnreadableJson(f"JSON nested deeper than {max_depth} levels")


def check_utf8(document: bytes) -> None:
    """JSON text is UTF-8 (RFC 8259 §8.1): other bytes are refused, not guessed at."""
    try:
        document.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableJson(f"JSON is not valid UTF-8 (byte {exc.start})") from exc


def check_json_text(document: bytes, max_depth: int) -> None:
    """The checks every JSON document from outside passes before a decoder sees it."""
    check_utf8(document)
    check_depth(document, max_depth)


def decode_base64_json(raw: str, max_chars: int, max_depth: int) -> Any:
    """The JSON value in a base64 (standard or URL-safe, padded or not) header value, its size,
    UTF-8 and depth checked before it is parsed; raises UnreadableJson otherwise."""
    raw = raw.strip()
    if len(raw) > max_chars:
        raise UnreadableJson(f"longer than {max_chars} characters")
    if not _BASE64.match(raw):
        raise UnreadableJson("not base64")
    try:
        document = binascii.a2b_base64(_standard_padded(raw), strict_mode=False)
    except binascii.Error as exc:
        raise UnreadableJson("not base64") from exc
    check_json_text(document, max_depth)
    try:
        return json.loads(document)
    except ValueError as exc:
        raise UnreadableJson("not JSON") from exc


def _standard_padded(raw: str) -> str:
    standard = raw.rstrip("=").replace("-", "+").replace("_", "/")
    return standard + "=" * (-len(standard) % 4)
