"""`engram wallet`: a throwaway wallet, and from a wallet's key what curl users send: a signed
header, a session token, a signed delegation for an agent key."""

from __future__ import annotations

import argparse
import os
import time


def cmd_wallet_sign(args: argparse.Namespace) -> None:
    from app.auth.signature import sign_header

    key = args.key or os.environ.get("ENGRAM_PRIVATE_KEY") or os.environ.get("MEMOCLAW_PRIVATE_KEY")
    if not key:
        raise SystemExit("engram wallet sign: pass --key or set ENGRAM_PRIVATE_KEY")
    print(sign_header(key))


def cmd_wallet_session(args: argparse.Namespace) -> None:
    """Trade the wallet's signature for a session token (POST /auth/session) and print it."""
    import httpx
    from eth_account import Account
    from eth_account.messages import encode_defunct

    from app.auth.signature import auth_message

    key = os.environ.get("ENGRAM_PRIVATE_KEY") or os.environ.get("MEMOCLAW_PRIVATE_KEY")
    if not key:
        raise SystemExit("engram wallet session: set ENGRAM_PRIVATE_KEY in the environment")
    url = (args.url or os.environ.get("ENGRAM_URL") or "http://127.0.0.1:8000").rstrip("/")
    account = Account.from_key(key)
    ts = int(time.time())
    signature = account.sign_message(encode_defunct(text=auth_message(ts))).signature.hex()
    r = httpx.post(f"{url}/auth/session", timeout=30, json={
        "address": account.address, "timestamp": ts, "signature": signature,
    })  # fmt: skip
    if r.status_code != 200:
        raise SystemExit(f"engram wallet session: {r.status_code} {r.text}")
    print(r.json()["token"])


def cmd_wallet_delegate(args: argparse.Namespace) -> None:
    """Print the body of POST /v1/agents: a delegation the owner (ENGRAM_PRIVATE_KEY) signs."""
    import json
    import secrets
    from datetime import UTC, datetime, timedelta

    from eth_account import Account

    from app.agents.service import delegation_message, issued_now, sign_delegation
    from app.auth.siwx import origin_of

    key = args.key or os.environ.get("ENGRAM_PRIVATE_KEY") or os.environ.get("MEMOCLAW_PRIVATE_KEY")
    if not key:
        raise SystemExit("engram wallet delegate: pass --key or set ENGRAM_PRIVATE_KEY")
    url = args.url or os.environ.get("ENGRAM_URL") or "http://127.0.0.1:8000"
    owner = Account.from_key(key).address.lower()
    scopes = [s.strip() for s in args.scopes.split(",") if s.strip()]
    namespaces = [n for n in args.namespaces.split(",") if n] if args.namespaces else None
    expires_at = None
    if args.days is not None:
        moment = datetime.now(UTC) + timedelta(days=args.days)
        expires_at = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    nonce, issued_at = secrets.token_hex(16), issued_now()
    message = delegation_message(origin_of(url), owner, args.agent, scopes, namespaces,
                                 issued_at, expires_at, nonce)  # fmt: skip
    body = {"owner": owner, "agent": args.agent.lower(), "scopes": scopes,
            "namespaces": namespaces, "issued_at": issued_at, "expires_at": expires_at,
            "nonce": nonce, "signature": sign_delegation(key, message)}  # fmt: skip
    print(json.dumps({k: v for k, v in body.items() if v is not None}))


def cmd_wallet_new(_: argparse.Namespace) -> None:
    from eth_account import Account

    account = Account.create()
    print(f"address:     {account.address}")
    key = account.key.hex()
    print(f"private key: {key if key.startswith('0x') else '0x' + key}")
