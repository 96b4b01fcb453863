"""Verify MemoClaw's `x-wallet-auth: {address}:{unix_ts}:{signature}` header.

The signature is EIP-191 personal_sign of `memoclaw-auth:{unix_ts}`. Recovery goes through
eth-keys, which uses coincurve when it is installed (it is a dependency), and each verified header
is cached for the rest of its validity window so an agent's burst of calls recovers once.

The scheme has no nonce, so a captured header replays until its timestamp is older than the
window (300 s by MemoClaw's contract; ENGRAM_AUTH_WINDOW_SECONDS shortens it). What Engram
narrows: a timestamp more than 30 s in the future is refused (else a pre-dated header would live
window + skew), and so is the high-s twin of a signature (one signature, one spelling; the
signature without `0x`, as MemoClaw's Python SDK sends it, stays accepted). For replay-proof
identity see app/auth/siwx.py.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from eth_account import Account
from eth_account.messages import encode_defunct

AUTH_MESSAGE_PREFIX = "memoclaw-auth:"
ADDRESS_RE = re.compile(r"^0x[0-9a-fA-F]{40}$")
SIGNATURE_RE = re.compile(r"^(0x)?[0-9a-fA-F]{130}$")
TIMESTAMP_RE = re.compile(r"^\d{1,12}$")
VERIFIED_CACHE_SIZE = 10_000
# The contract's window (docs/api-contract.md, "Identity rules"): the most an operator may set.
MAX_WINDOW_SECONDS = 300
# Clock difference tolerated for a timestamp ahead of the server's clock.
MAX_FUTURE_SKEW_SECONDS = 30
# secp256k1's group order: a signature's s above half of it is the malleable twin (EIP-2).
SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


class WalletAuthError(Exception):
    """Why a wallet header was refused; the message is shown to the client."""


@dataclass(frozen=True)
class SignedHeader:
    address: str  # lower-cased: the wallet's user id
    timestamp: int
    signature: bytes


def auth_message(timestamp: int | str) -> str:
    return f"{AUTH_MESSAGE_PREFIX}{timestamp}"


def parse_header(raw: str) -> SignedHeader:
    parts = raw.strip().split(":")
    if len(parts) != 3:
        raise WalletAuthError(
            "Malformed x-wallet-auth header: expected {address}:{unix_timestamp}:{signature}"
        )
    address, ts, sig = parts
    if not ADDRESS_RE.match(address):
        raise WalletAuthError(
            "Malformed x-wallet-auth header: address must be 0x and 40 hex digits"
        )
    if not TIMESTAMP_RE.match(ts):
        raise WalletAuthError("Malformed x-wallet-auth header: timestamp must be unix seconds")
    if not SIGNATURE_RE.match(sig):
        raise WalletAuthError(
            "Malformed x-wallet-auth header: signature must be 65 bytes of hex (0x optional)"
        )
    return SignedHeader(address.lower(), int(ts), bytes.fromhex(sig.removeprefix("0x")))


def check_fresh(header: SignedHeader, now: float, window_seconds: int) -> None:
    age = now - header.timestamp
    if age > window_seconds:
        raise WalletAuthError(
            f"Stale x-wallet-auth header: timestamp is {int(age)} s old"
            f" (limit {window_seconds} s); sign a fresh one"
        )
    if -age > MAX_FUTURE_SKEW_SECONDS:
        raise WalletAuthError(
            f"x-wallet-auth timestamp is {int(-age)} s in the future (limit"
            f" {MAX_FUTURE_SKEW_SECONDS} s); check the client clock"
        )


def is_high_s(signature: bytes) -> bool:
    """EIP-2: of a signature's two valid spellings (s and n - s) only the low one is canonical."""
    return int.from_bytes(signature[32:64], "big") > SECP256K1_N // 2


def check_low_s(header: SignedHeader) -> None:
    if is_high_s(header.signature):
        raise WalletAuthError(
            "Invalid x-wallet-auth signature: non-canonical (high-s); sign with a standard"
            " EIP-191 signer"
        )


def personal_signer(message: str, signature: str | bytes) -> str | None:
    """The lower-cased address whose EIP-191 `personal_sign` of `message` this is (an EOA's: no
    chain is asked about contract wallets), or None when it recovers to no one. Every signed
    text Engram reads (x-wallet-auth, SIGN-IN-WITH-X, delegations) is recovered here."""
    try:
        # recover_message is a combomethod, which the checker sees as Any.
        signer: str = Account.recover_message(encode_defunct(text=message), signature=signature)
    except Exception:  # eth-keys raises several types for unrecoverable signatures
        return None
    return signer.lower()


def recover_signer(header: SignedHeader) -> str:
    signer = personal_signer(auth_message(header.timestamp), header.signature)
    if signer is None:
        raise WalletAuthError("Invalid x-wallet-auth signature: it cannot be recovered")
    return signer


class WalletVerifier:
    """Checks headers, remembering verified ones until their window closes."""

    def __init__(
        self, window_seconds: int = MAX_WINDOW_SECONDS, cache_size: int = VERIFIED_CACHE_SIZE
    ) -> None:
        if not 1 <= window_seconds <= MAX_WINDOW_SECONDS:
            raise ValueError(
                f"ENGRAM_AUTH_WINDOW_SECONDS must be 1..{MAX_WINDOW_SECONDS}, got {window_seconds}"
            )
        self.window_seconds = window_seconds
        self._cache_size = cache_size
        self._verified: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._lock = threading.Lock()

    def verify(self, raw: str, now: float | None = None) -> str:
        """Return the lower-cased wallet address, or raise WalletAuthError saying why."""
        now = time.time() if now is None else now
        header = parse_header(raw)
        check_fresh(header, now, self.window_seconds)
        check_low_s(header)
        if self._cached(raw) == header.address:
            return header.address
        if recover_signer(header) != header.address:
            raise WalletAuthError(
                "Invalid x-wallet-auth signature: it was not made by "
                f"{header.address} over '{auth_message(header.timestamp)}'"
            )
        self._remember(raw, header)
        return header.address

    def _cached(self, raw: str) -> str | None:
        with self._lock:
            hit = self._verified.get(raw)
            if hit is None:
                return None
            self._verified.move_to_end(raw)
            return hit[0]

    def _remember(self, raw: str, header: SignedHeader) -> None:
        with self._lock:
            self._verified[raw] = (header.address, header.timestamp)
            if len(self._verified) > self._cache_size:
                self._verified.popitem(last=False)


def sign_header(private_key: str, timestamp: int | None = None) -> str:
    """Build a header the way MemoClaw's clients do (used by `engram wallet sign` and tests)."""
    account = Account.from_key(private_key)
    ts = int(time.time()) if timestamp is None else timestamp
    signed = account.sign_message(encode_defunct(text=auth_message(ts)))
    return f"{account.address}:{ts}:{signed.signature.hex()}"
