"""Console sign-in: who a browser is, kept on the server.

- A session is a random token in an HttpOnly, SameSite=Strict cookie (Secure over HTTPS); the
  server keeps only its SHA-256, with the wallet, the session's CSRF token and its expiry.
  Signing out deletes the row, so the cookie is worth nothing after, wherever it was copied.
- A sign-in link (`engram console`) is a random token that the CLI gets by signing a
  SIGN-IN-WITH-X challenge; the browser opening it gets a session. It works once, for
  LINK_TTL_SECONDS. A browser already signed in as another wallet is asked first: the link
  replaces that session only when the person confirms, so a link sent by someone else cannot
  swap a signed-in browser into the sender's wallet (login CSRF).
- Every session has its own CSRF token (a synchronizer token): the console's forms carry it,
  its scripts send it as `x-csrf-token`, and every state-changing console request must show it.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import asyncpg

from app.console import repository
from app.core.request_values import ConsoleSession

LINK_TTL_SECONDS = 300
SWEEP_SECONDS = 60.0
SWEPT_PER_STATEMENT = 1000


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class NewSession:
    token: str  # the cookie's value; never stored
    session: ConsoleSession


class ConsoleSessions:
    def __init__(self, ttl_seconds: int) -> None:
        if ttl_seconds < 1:
            raise ValueError("ENGRAM_CONSOLE_SESSION_TTL_SECONDS must be at least 1")
        self.ttl_seconds = ttl_seconds

    async def start(self, conn: asyncpg.Connection, wallet: str) -> NewSession:
        token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        expires = await repository.create_session(
            conn, token_hash(token), wallet, csrf, self.ttl_seconds
        )
        return NewSession(token, ConsoleSession(wallet, csrf, expires))

    async def find(self, conn: asyncpg.Connection, token: str) -> ConsoleSession | None:
        row = await repository.live_session(conn, token_hash(token))
        if row is None:
            return None
        return ConsoleSession(row["wallet"], row["csrf_token"], row["expires_at"])

    async def end(self, conn: asyncpg.Connection, token: str) -> bool:
        return await repository.delete_session(conn, token_hash(token))

    async def issue_link(self, conn: asyncpg.Connection, wallet: str) -> str:
        token = secrets.token_urlsafe(32)
        await repository.create_link(conn, token_hash(token), wallet, LINK_TTL_SECONDS)
        return token

    async def link_wallet(self, conn: asyncpg.Connection, token: str) -> str | None:
        """Whose a live link is, without spending it (a switch of session is asked first)."""
        return await repository.link_wallet(conn, token_hash(token))

    async def redeem_link(self, conn: asyncpg.Connection, token: str) -> str | None:
        """The link's wallet, the link used up; None for a used, expired or unknown link."""
        return await repository.consume_link(conn, token_hash(token))

    async def sweep(self, pool: asyncpg.Pool) -> int:
        """Delete expired sessions and links, a batch at a time (on a timer: app/asgi.py); how
        many went."""
        swept = 0
        for sweep_one in (repository.sweep_expired_sessions, repository.sweep_expired_links):
            while True:
                async with pool.acquire() as conn:
                    n = await sweep_one(conn, SWEPT_PER_STATEMENT)
                swept += n
                if n < SWEPT_PER_STATEMENT:
                    break
        return swept
