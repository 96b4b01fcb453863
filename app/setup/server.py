"""The Engram server `engram setup` points the clients at: is it up (GET /health), start
`engram serve` in the background when asked (detached, its output in a log file of the data
directory, ready once GET /ready answers 200), a session token for /mcp over HTTP
(POST /auth/session) and the console's link."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from app.setup.service import InvalidArgument, SetupError, Wallet

DEFAULT_URL = "http://127.0.0.1:8000"
CHECK_TIMEOUT_S = 3.0
# A session token kept in an MCP entry is renewed when it has less than this left.
TOKEN_MIN_LEFT_S = 86_400
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
CONSOLE_PATH = "/console"


@dataclass(frozen=True)
class Health:
    up: bool  # /health answered 200
    reachable: bool  # something answered at all (then a second server cannot take the port)
    detail: str


def normalize_url(raw: str) -> str:
    url = raw.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"--url must be an http(s) URL like {DEFAULT_URL}")
    try:
        _ = parts.port  # a port out of range raises here
    except ValueError as exc:
        raise InvalidArgument(f"--url: {exc}") from None
    return url


def is_local(url: str) -> bool:
    return urlsplit(url).hostname in LOCAL_HOSTS


def check(url: str, timeout: float = CHECK_TIMEOUT_S) -> Health:
    try:
        answer = httpx.get(f"{url}/health", timeout=timeout)
    except httpx.HTTPError as exc:
        return Health(False, False, f"not reachable ({exc or type(exc).__name__})")
    if answer.status_code == 200:
        try:
            version = answer.json().get("version")
        except ValueError:
            version = None
        return Health(True, True, f"up (Engram {version})" if version else "up")
    return Health(False, True, f"answers {answer.status_code} on /health: {answer.text[:200]}")


def engram_command() -> list[str]:
    """How to run this Engram: its console script beside this Python, else `python -m app`."""
    script = Path(sys.executable).with_name("engram")
    return [str(script)] if script.exists() else [sys.executable, "-m", "app"]


def data_dir() -> Path:
    """Engram's data directory (app/db/embedded.py's): ENGRAM_DATA_DIR or the user's."""
    import platformdirs

    override = os.environ.get("ENGRAM_DATA_DIR")
    return Path(override).expanduser() if override else platformdirs.user_data_path("engram")


def start(url: str, log: Path) -> subprocess.Popen[bytes]:
    """`engram serve` on the URL's host and port, in its own session (it outlives setup and
    the terminal), its output appended to `log`."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        return subprocess.Popen(
            [*engram_command(), "serve", "--host", parts.hostname or "127.0.0.1", "--port",
             str(port)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=log.parent,
        )  # fmt: skip


def wait_ready(url: str, server: subprocess.Popen[bytes], timeout: float) -> Health:
    """Until GET /ready answers 200 (the first start runs initdb, the migrations and builds the
    embedding model), the process exits, or `timeout` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = server.poll()
        if code is not None:
            return Health(False, False, f"engram serve exited with code {code}")
        try:
            if httpx.get(f"{url}/ready", timeout=CHECK_TIMEOUT_S).status_code == 200:
                return check(url)
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return Health(False, False, f"not ready after {timeout:.0f} s (still starting?)")


def session_token(url: str, wallet: Wallet) -> str:
    """A bearer token for the wallet (POST /auth/session, as `engram wallet session`)."""
    from eth_account import Account
    from eth_account.messages import encode_defunct

    from app.auth.signature import auth_message

    ts = int(time.time())
    signed = Account.from_key(wallet.private_key).sign_message(
        encode_defunct(text=auth_message(ts))
    )
    signature = signed.signature.hex()
    body = {"address": wallet.address, "timestamp": ts,
            "signature": signature if signature.startswith("0x") else "0x" + signature}  # fmt: skip
    try:
        answer = httpx.post(f"{url}/auth/session", json=body, timeout=30)
    except httpx.HTTPError as exc:
        raise SetupError(f"POST /auth/session: {exc}") from None
    if answer.status_code != 200:
        raise SetupError(f"POST /auth/session answered {answer.status_code}: {answer.text[:200]}")
    return str(answer.json()["token"])


def token_still_good(token: str, wallet: Wallet, now: float | None = None) -> bool:
    """Whether a token names this wallet and has a day or more left (read, not verified: the
    server verifies it; here it only decides whether to ask for a new one)."""
    import jwt

    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return False
    left = float(claims.get("exp", 0)) - (time.time() if now is None else now)
    return claims.get("sub") == wallet.address.lower() and left >= TOKEN_MIN_LEFT_S


@dataclass(frozen=True)
class ConsoleLink:
    url: str
    signed_in: bool  # a one-time sign-in link, else the console's page


def console_link(url: str, wallet: Wallet, server_up: bool) -> ConsoleLink:
    """The console's one-time sign-in link when the console offers one and the server is up
    (app/console/link.py, imported only here: setup works without the console), else its page."""
    if server_up:
        try:
            link = importlib.import_module("app.console.link")
            return ConsoleLink(str(link.console_link(url, wallet.private_key)), True)
        except Exception:  # no console in this install, or no sign-in: the plain link below
            pass
    return ConsoleLink(url + CONSOLE_PATH, False)
