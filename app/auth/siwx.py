"""Sign-In-With-X (x402's extension: a CAIP-122 / EIP-4361 message), Engram's replay-proof way to
say which wallet is calling. Clients opt into it; MemoClaw's x-wallet-auth stays accepted.

1. `GET /auth/nonce` hands out a challenge: Engram's domain and URI, a fresh nonce, issuedAt and
   expirationTime (the auth window), the chain id and a statement. The nonce is kept in
   PostgreSQL (`auth_nonces`), where every instance sees it.
2. The client signs the challenge as a SIWE message (x402's `create_siwx_payload` does it) and
   sends `SIGN-IN-WITH-X: base64(payload)` (x402's `encode_siwx_header`), on any request or on
   `POST /auth/session` to mint a session token.
3. Engram bounds every field of the payload (the limits below), checks it with x402's own
   `validate_siwx_message` (the domain and URI are its origin, issuedAt is within the window and
   not ahead, the message has not expired), that the chain is Engram's and each field keeps to
   EIP-4361's grammar, and that the signature is the address's; then it uses the nonce up
   (deleting its row succeeds once).

The signature is checked here rather than by x402's `verify_siwx_signature`: that one formats
the message, then parses it back with siwe's ABNF parser, whose time and memory grow faster than
the message (a 6,400-character statement took 4.6 s and 408 MB; 60,000 hung the process), all
before the signature is known to be anyone's. Engram has every field already, so it checks
each against the grammar with linear expressions, writes the EIP-4361 text as siwe's
`prepare_message` does (tests/auth/test_siwx_message.py holds the two to the same text and the
same verdict), and recovers the signer from it: time linear in the bounded size, about 2 ms
with every field at its limit (bench/siwx_verify.py), so it runs on the event loop.

Against x-wallet-auth this protects from replay (a captured header works for no one: its nonce
is spent), from use on another site (the domain is signed) and from pre-dating (the server sets
issuedAt). Nonces are used only after the signature checks out, so a forged header cannot burn
someone's nonce.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import asyncpg
from eth_utils.address import is_checksum_address
from pydantic import ValidationError
from x402.extensions.sign_in_with_x import (
    SIWxPayload,
    SIWxValidationOptions,
    validate_siwx_message,
)

from app.auth import repository
from app.auth.schemas import SiwxChallenge
from app.auth.signature import WalletAuthError, personal_signer
from app.core.json_input import UnreadableJson, decode_base64_json

SIWX_HEADER = "sign-in-with-x"
STATEMENT = "Sign in to Engram with this wallet."
SIWX_VERSION = "1"
# What a SIGN-IN-WITH-X header may hold before it is parsed: a challenge signed as issued is
# about 1 KiB of base64 and 2 levels deep (the payload, its resources); these leave room for a
# long statement and resource list, and none for a document built to exhaust the decoder.
MAX_HEADER_CHARS = 8 * 1024
MAX_HEADER_DEPTH = 4
# What x402's SIWX helpers raise on values they cannot read (an URI that is no URL, a
# signature that is not hex, a date past the calendar): the header is malformed, not the server.
# EIP-4361's nonce: at least 8 alphanumerics (Engram issues 32 hex digits); anything else was
# never issued, and is not sent to the database (a NUL would be an error there).
MAX_NONCE_CHARS = 128
NONCE_RE = re.compile(rf"^[A-Za-z0-9]{{8,{MAX_NONCE_CHARS}}}$")
UNREADABLE_VALUES = (ValueError, TypeError, OverflowError, IndexError)

# The most each field of a SIGN-IN-WITH-X message may hold, checked before anything reads it
# (the header's own bound, MAX_HEADER_CHARS, comes first; the console's sign-in body reaches 64
# KiB). What Engram issues (`challenge` below) is far inside: a 35-character statement, its
# origin as domain and URI, 20-character dates, no resources or request id. The rest is room for
# clients that add their own, and none for a message built to be slow.
MAX_DOMAIN_CHARS = 255  # a DNS name (253) and a port; it must equal Engram's own host anyway
MAX_URI_CHARS = 2048  # Engram's origin, or a URL on it: what browsers and proxies carry
MAX_STATEMENT_CHARS = 1024  # a sentence or a paragraph for the wallet to show
MAX_RESOURCES = 16  # EIP-4361's optional list of URIs the sign-in refers to
MAX_RESOURCE_CHARS = 2048  # each, as a URI
MAX_REQUEST_ID_CHARS = 256  # a client's own request id
MAX_DATE_CHARS = 64  # issuedAt, expirationTime, notBefore: RFC 3339 needs 20 to about 35
MAX_CHAIN_ID_CHARS = 64  # CAIP-2 ids are at most 41; it must equal Engram's anyway
MAX_VERSION_CHARS = 1  # EIP-4361 has one version, "1"
ADDRESS_CHARS = 42  # 0x and 40 hex digits
# An EOA's signature is 65 bytes, 132 characters as 0x-hex; contract wallets' (EIP-1271, -6492)
# are longer, and this server cannot check them (no chain provider): refused either way.
MAX_SIGNATURE_CHARS = 1024
FIELD_LIMITS = {
    "domain": MAX_DOMAIN_CHARS, "uri": MAX_URI_CHARS, "statement": MAX_STATEMENT_CHARS,
    "requestId": MAX_REQUEST_ID_CHARS, "issuedAt": MAX_DATE_CHARS,
    "expirationTime": MAX_DATE_CHARS, "notBefore": MAX_DATE_CHARS,
    "chainId": MAX_CHAIN_ID_CHARS, "version": MAX_VERSION_CHARS,
    "signature": MAX_SIGNATURE_CHARS, "nonce": MAX_NONCE_CHARS, "address": ADDRESS_CHARS,
}  # fmt: skip

# EIP-4361's grammar (its ABNF, with RFC 3986's characters and RFC 3339's date-time), as
# expressions with no nested choice and possessive repeats: linear, no backtracking. A URI is
# held to URI characters after a scheme, not to RFC 3986's full structure: the domain and URI
# are compared with Engram's origin besides, resources are read by nothing here, and the
# signature covers the exact text. No field may hold a line break, so the text parses one way.
_PCT = r"%[0-9A-Fa-f]{2}"
_URI_CHARS = r"A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;="
STATEMENT_RE = re.compile(rf"[{_URI_CHARS} ]*+")
URI_RE = re.compile(rf"[A-Za-z][A-Za-z0-9+\-.]*+:(?:[{_URI_CHARS}]|{_PCT})*+")
REQUEST_ID_RE = re.compile(rf"(?:[A-Za-z0-9\-._~!$&'()*+,;=:@]|{_PCT})*+")
DATE_TIME_RE = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]++)?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)
ADDRESS_RE = re.compile(r"0x[0-9a-fA-F]{40}")
EVM_CHAIN_RE = re.compile(r"eip155:([0-9]{1,32})")


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def origin_of(url: str) -> str:
    """scheme://host[:port] of a URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


# Expired sign-in nonces deleted per statement of a sweep, and how often an instance sweeps.
NONCES_PER_SWEEP = 1000
NONCE_SWEEP_SECONDS = 60.0


class SiwxVerifier:
    def __init__(self, chain_id: str, window_seconds: int) -> None:
        self.chain_id = chain_id  # CAIP-2, the x402 network's (eip155:8453 on Base)
        self.window_seconds = window_seconds

    async def challenge(
        self, conn: asyncpg.Connection, origin: str, now: datetime | None = None
    ) -> SiwxChallenge:
        """A fresh single-use challenge for `origin`, in SIWX's extension-info shape."""
        issued = (now or datetime.now(UTC)).replace(microsecond=0)
        nonce = secrets.token_hex(16)
        await repository.issue_nonce(conn, nonce, self.window_seconds)
        return SiwxChallenge(
            domain=urlsplit(origin).netloc,
            uri=origin,
            version=SIWX_VERSION,
            statement=STATEMENT,
            nonce=nonce,
            issuedAt=_iso(issued),
            expirationTime=_iso(issued + timedelta(seconds=self.window_seconds)),
            chainId=self.chain_id,
            type="eip191",
            header=SIWX_HEADER.upper(),
        )

    async def sweep_expired(self, pool: asyncpg.Pool) -> int:
        """Clear expired nonces (on a timer: app/asgi.py); a batch at a time, so a long backlog
        never holds locks for long. How many went."""
        swept = 0
        while True:
            async with pool.acquire() as conn:
                n = await repository.sweep_expired_nonces(conn, NONCES_PER_SWEEP)
            swept += n
            if n < NONCES_PER_SWEEP:
                return swept

    async def verify(self, conn: asyncpg.Connection, raw: str, origin: str) -> str:
        """The lower-cased wallet of a SIGN-IN-WITH-X header, its nonce used up; else raises
        WalletAuthError saying why."""
        return await self.verify_payload(conn, read_payload(raw), origin, "header")

    async def verify_payload(self, conn: asyncpg.Connection, payload: SIWxPayload, origin: str,
                             carrier: str = "proof") -> str:  # fmt: skip
        """verify() for a payload already read (the console's browser sign-in sends it as JSON)."""
        wallet, nonce = await self.signer_of_payload(payload, origin, carrier), payload.nonce
        if not NONCE_RE.match(nonce) or not await repository.consume_nonce(conn, nonce):
            raise WalletAuthError(
                "SIGN-IN-WITH-X refused: its nonce is unknown, expired or already used; get a"
                " fresh one at GET /auth/nonce"
            )
        return wallet

    async def signer_of(self, raw: str, origin: str) -> tuple[str, str]:
        """(wallet, nonce) of a header signed for this origin and chain within the window,
        before its nonce is looked at; raises WalletAuthError, and nothing else, otherwise."""
        payload = read_payload(raw)
        return await self.signer_of_payload(payload, origin, "header"), payload.nonce

    async def signer_of_payload(self, payload: SIWxPayload, origin: str,
                                carrier: str = "proof") -> str:  # fmt: skip
        """signer_of() for a payload already read: each field's size is checked before anything
        reads it (FIELD_LIMITS), then its grammar and signature; WalletAuthError otherwise."""
        try:
            check_field_sizes(payload)
            return await self._signed_by(payload, origin)
        except UNREADABLE_VALUES as exc:
            raise WalletAuthError(f"Malformed SIGN-IN-WITH-X {carrier}: {exc}") from exc

    async def _signed_by(self, payload: SIWxPayload, origin: str) -> str:
        """The wallet that signed this message for this origin and chain, within the window."""
        options = SIWxValidationOptions(maxAge=self.window_seconds * 1000)
        checked = await validate_siwx_message(payload, origin, options)
        if not checked.is_valid:
            raise WalletAuthError(
                f"SIGN-IN-WITH-X refused ({checked.invalid_reason}): {checked.invalid_message}"
            )
        if payload.chain_id != self.chain_id:
            raise WalletAuthError(
                f"SIGN-IN-WITH-X refused: chain {payload.chain_id!r} is not {self.chain_id!r}"
            )
        check_grammar(payload)
        if personal_signer(siwe_message(payload), payload.signature) != payload.address.lower():
            raise WalletAuthError(
                "SIGN-IN-WITH-X refused (invalid_siwx_signature): Signature verification failed"
            )
        return payload.address.lower()

    def message_for(self, challenge: SiwxChallenge, address: str) -> str:
        """The EIP-4361 text a wallet at `address` signs for one of Engram's challenges."""
        return eip4361_text(
            domain=challenge.domain, address=address, statement=challenge.statement,
            uri=challenge.uri, version=challenge.version, chain_id=evm_chain(challenge.chainId),
            nonce=challenge.nonce, issued_at=challenge.issuedAt,
            expiration_time=challenge.expirationTime,
        )  # fmt: skip


class FieldUnreadable(ValueError):
    """A field past its limit or outside EIP-4361's grammar: the proof is malformed."""


def check_field_sizes(payload: SIWxPayload) -> None:
    """Every field within its limit (FIELD_LIMITS, MAX_RESOURCES), before anything parses one."""
    fields = payload.model_dump(by_alias=True)
    for name, limit in FIELD_LIMITS.items():
        value = fields.get(name)
        if isinstance(value, str) and len(value) > limit:
            raise FieldUnreadable(f"{name} is {len(value)} characters long; the limit is {limit}")
    resources = payload.resources or []
    if len(resources) > MAX_RESOURCES:
        raise FieldUnreadable(
            f"resources lists {len(resources)} URIs; the limit is {MAX_RESOURCES}"
        )
    for resource in resources:
        if len(resource) > MAX_RESOURCE_CHARS:
            raise FieldUnreadable(
                f"a resource is {len(resource)} characters long; the limit is {MAX_RESOURCE_CHARS}"
            )


def check_grammar(payload: SIWxPayload) -> None:
    """The fields EIP-4361's grammar shapes, held to it (FieldUnreadable otherwise), as siwe's
    own model would before it formats the message."""
    if not ADDRESS_RE.fullmatch(payload.address):
        raise FieldUnreadable("address must be 0x and 40 hex digits")
    hexits = payload.address[2:]
    if hexits not in (hexits.lower(), hexits.upper()) and not is_checksum_address(payload.address):
        raise FieldUnreadable("address has mixed case that is not its EIP-55 checksum")
    if payload.version != SIWX_VERSION:
        raise FieldUnreadable(f"version must be {SIWX_VERSION!r}")
    if not NONCE_RE.match(payload.nonce):
        raise FieldUnreadable("nonce must be 8 to 128 letters and digits")
    shapes = [("statement", payload.statement, STATEMENT_RE),
              ("requestId", payload.request_id, REQUEST_ID_RE), ("uri", payload.uri, URI_RE),
              ("issuedAt", payload.issued_at, DATE_TIME_RE),
              ("expirationTime", payload.expiration_time, DATE_TIME_RE),
              ("notBefore", payload.not_before, DATE_TIME_RE)]  # fmt: skip
    shapes += [("resources", resource, URI_RE) for resource in payload.resources or []]
    for name, value, shape in shapes:
        if value is not None and not shape.fullmatch(value):
            raise FieldUnreadable(f"{name} holds characters or a shape EIP-4361 does not allow")


def evm_chain(chain_id: str) -> int:
    """The number of an `eip155:<n>` chain id."""
    matched = EVM_CHAIN_RE.fullmatch(chain_id)
    if matched is None:
        raise FieldUnreadable(f"chainId {chain_id!r} is not eip155:<number>")
    return int(matched.group(1))


def siwe_message(payload: SIWxPayload) -> str:
    """The EIP-4361 text the payload's wallet signed (x402's `format_siwe_message`)."""
    return eip4361_text(
        domain=payload.domain, address=payload.address, statement=payload.statement,
        uri=payload.uri, version=payload.version, chain_id=evm_chain(payload.chain_id),
        nonce=payload.nonce, issued_at=payload.issued_at,
        expiration_time=payload.expiration_time, not_before=payload.not_before,
        request_id=payload.request_id, resources=payload.resources,
    )  # fmt: skip


def eip4361_text(*, domain: str, address: str, statement: str | None, uri: str, version: str,
                 chain_id: int, nonce: str, issued_at: str, expiration_time: str | None = None,
                 not_before: str | None = None, request_id: str | None = None,
                 resources: list[str] | None = None) -> str:  # fmt: skip
    """A SIWE message as siwe's `SiweMessage.prepare_message` writes it, line for line."""
    prefix = f"{domain} wants you to sign in with your Ethereum account:\n{address}"
    suffix = [f"URI: {uri}", f"Version: {version}", f"Chain ID: {chain_id}", f"Nonce: {nonce}",
              f"Issued At: {issued_at}"]  # fmt: skip
    if expiration_time:
        suffix.append(f"Expiration Time: {expiration_time}")
    if not_before:
        suffix.append(f"Not Before: {not_before}")
    if request_id is not None:
        suffix.append(f"Request ID: {request_id}")
    if resources is not None:
        suffix.append("\n".join(["Resources:", *(f"- {resource}" for resource in resources)]))
    prefix = f"{prefix}\n\n{statement}" if statement is not None else f"{prefix}\n"
    return prefix + "\n\n" + "\n".join(suffix)


def read_payload(raw: str) -> SIWxPayload:
    """The header's payload (x402's SIWxPayload), its size and depth bounded before it is
    parsed; WalletAuthError("Malformed SIGN-IN-WITH-X header: ...") otherwise."""
    try:
        document = decode_base64_json(raw, MAX_HEADER_CHARS, MAX_HEADER_DEPTH)
        return SIWxPayload.model_validate(document)
    except UnreadableJson as exc:
        raise WalletAuthError(f"Malformed SIGN-IN-WITH-X header: {exc}") from exc
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "$" for e in exc.errors())
        raise WalletAuthError(f"Malformed SIGN-IN-WITH-X header: invalid {fields}") from exc
