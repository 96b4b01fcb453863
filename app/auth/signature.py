"""Verify MemoClaw's `x-wallet-auth: {address}:{unix_ts}:{signature}` header.

The signature is EIP-191 personal_sign of `memoclaw-auth:{unix_ts}`. Recovery goes through
eth-keys, which uses coincurve when it is installed (it is a dependency), and each verified header
is cached for the rest of its validity window so an agent's burst of calls recovers once.
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
    skew = now - header.timestamp
    if skew > window_seconds:
        raise WalletAuthError(
            f"Stale x-wallet-auth header: timestamp is {int(skew)} s old"
            f" (limit {window_seconds} s); sign a fresh one"
        )
    if -skew > window_seconds:
        raise WalletAuthError(
            f"x-wallet-auth timestamp is {int(-skew)} s in the future (limit {window_seconds} s);"
            " check the client clock"
        )


def recover_signer(header: SignedHeader) -> str:
    try:
        # recover_message is a combomethod, which the checker sees as Any.
        signer: str = Account.recover_message(
            encode_defunct(text=auth_message(header.timestamp)), signature=header.signature
        )
    except Exception as exc:  # eth-keys raises several types for unrecoverable signatures
        raise WalletAuthError("Invalid x-wallet-auth signature: it cannot be recovered") from exc
    return signer.lower()


class WalletVerifier:
    """Checks headers, remembering verified ones until their window closes."""

    def __init__(self, window_seconds: int = 300, cache_size: int = VERIFIED_CACHE_SIZE) -> None:
        self.window_seconds = window_seconds
        self._cache_size = cache_size
        self._verified: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._lock = threading.Lock()

    def verify(self, raw: str, now: float | None = None) -> str:
        """Return the lower-cased wallet address, or raise WalletAuthError saying why."""
        now = time.time() if now is None else now
        header = parse_header(raw)
        check_fresh(header, now, self.window_seconds)
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
