"""x-wallet-auth verification: every accept and reject path, without HTTP."""

from __future__ import annotations

import pytest
from eth_account import Account

from app.auth.signature import WalletAuthError, WalletVerifier, parse_header, sign_header

NOW = 1_800_000_000


@pytest.fixture
def account():
    return Account.create()


def test_accepts_signature_without_0x_as_the_python_sdk_sends(account) -> None:
    header = sign_header(account.key.hex(), NOW)
    assert not header.split(":")[2].startswith("0x")
    assert WalletVerifier().verify(header, now=NOW) == account.address.lower()


def test_accepts_signature_with_0x_as_the_cli_sends(account) -> None:
    address, ts, sig = sign_header(account.key.hex(), NOW).split(":")
    assert WalletVerifier().verify(f"{address}:{ts}:0x{sig}", now=NOW) == address.lower()


def test_address_case_does_not_matter(account) -> None:
    address, ts, sig = sign_header(account.key.hex(), NOW).split(":")
    for variant in (address.lower(), "0x" + address[2:].upper()):
        assert WalletVerifier().verify(f"{variant}:{ts}:{sig}", now=NOW) == address.lower()


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("", "expected {address}"),
        ("0xabc:1:2", "address must be"),
        ("0x" + "a" * 40 + ":notanumber:" + "b" * 130, "timestamp must be"),
        ("0x" + "a" * 40 + ":1800000000:" + "b" * 12, "signature must be"),
        ("0x" + "a" * 40 + ":1800000000:" + "zz" * 65, "signature must be"),
        ("a:b:c:d", "expected {address}"),
    ],
)
def test_malformed_headers_say_what_is_wrong(raw: str, says: str) -> None:
    with pytest.raises(WalletAuthError, match="Malformed") as info:
        parse_header(raw)
    assert says in str(info.value)


def test_stale_and_future_timestamps_are_refused(account) -> None:
    verifier = WalletVerifier(window_seconds=300)
    assert verifier.verify(sign_header(account.key.hex(), NOW - 300), now=NOW)
    with pytest.raises(WalletAuthError, match="Stale"):
        verifier.verify(sign_header(account.key.hex(), NOW - 301), now=NOW)
    with pytest.raises(WalletAuthError, match="future"):
        verifier.verify(sign_header(account.key.hex(), NOW + 301), now=NOW)


def test_signature_by_another_key_is_refused(account) -> None:
    impostor = Account.create()
    _, ts, sig = sign_header(impostor.key.hex(), NOW).split(":")
    with pytest.raises(WalletAuthError, match="not made by"):
        WalletVerifier().verify(f"{account.address}:{ts}:{sig}", now=NOW)


def test_signature_over_another_timestamp_is_refused(account) -> None:
    address, _, sig = sign_header(account.key.hex(), NOW).split(":")
    with pytest.raises(WalletAuthError, match="not made by"):
        WalletVerifier().verify(f"{address}:{NOW + 1}:{sig}", now=NOW)


def test_unrecoverable_signature_is_refused(account) -> None:
    with pytest.raises(WalletAuthError, match="Invalid"):
        WalletVerifier().verify(f"{account.address}:{NOW}:{'00' * 65}", now=NOW)


def test_cached_header_still_expires(account) -> None:
    verifier = WalletVerifier(window_seconds=300)
    header = sign_header(account.key.hex(), NOW)
    assert verifier.verify(header, now=NOW)
    assert verifier.verify(header, now=NOW + 100)  # served from the cache
    with pytest.raises(WalletAuthError, match="Stale"):
        verifier.verify(header, now=NOW + 301)


def test_recovery_uses_the_coincurve_backend() -> None:
    """Fast recovery needs eth-keys on coincurve, not its pure-Python fallback."""
    from eth_keys.backends import get_backend  # the default eth-account's signatures use

    assert type(get_backend()).__name__ == "CoinCurveECCBackend"
