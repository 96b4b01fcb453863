"""Namespaces shared between wallets. An owner grants another wallet `read` or `write` on one
namespace; the grantee reaches it by naming the owner, for what the grant covers and nowhere
else: a grant never widens to another namespace, and never covers deleting the namespace or
managing grants (those routes take no owner). `write` covers reading too. Revoking, or the
expiry, takes effect on the next request: every request looks the grant up again.

No HTTP types here (controller.py); no SQL (repository.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from uuid import UUID

import asyncpg

from app.auth.signature import ADDRESS_RE
from app.core.errors import Forbidden, InvalidInput, NotFound, id_or_not_found
from app.core.request_values import MEMORY_OWNER_HEADER
from app.core.schemas import parse_future_time
from app.grants import repository as repo
from app.grants.schemas import Access, GrantIn

# what each access lets a grantee do
COVERS: dict[str, set[str]] = {"read": {"read", "write"}, "write": {"write"}}


class GrantService:
    async def grant(self, conn: asyncpg.Connection, owner: str, req: GrantIn) -> asyncpg.Record:
        grantee = req.grantee.lower()
        if grantee == owner:
            raise InvalidInput("a wallet cannot grant itself", {"field": "grantee"})
        expires_at = parse_future_time(req.expires_at, "expires_at", datetime.now(UTC))
        return await repo.insert(conn, owner, grantee, req.namespace, req.access, expires_at)

    async def of(self, conn: asyncpg.Connection, wallet: str) -> list[asyncpg.Record]:
        return await repo.live_of(conn, wallet)

    async def revoke(self, conn: asyncpg.Connection, owner: str, raw_id: str) -> UUID:
        grant_id = id_or_not_found(raw_id, "Grant")
        if not await repo.revoke(conn, owner, grant_id):
            raise NotFound(f"Grant {raw_id} not found")
        return grant_id

    async def acting_for(
        self,
        conn: asyncpg.Connection,
        caller: str,
        owner: str | None,
        namespace: str,
        need: Access,
    ) -> str:
        """The wallet whose memories a request reaches: the caller's own, or (the caller
        naming another owner) that owner's, when a live grant covers `need` on `namespace`;
        403 otherwise."""
        if owner is None or owner.lower() == caller:
            return caller
        if not ADDRESS_RE.match(owner):
            raise InvalidInput(
                f"{MEMORY_OWNER_HEADER} must be a wallet address", {"header": MEMORY_OWNER_HEADER}
            )
        owner = owner.lower()
        held = await repo.live_access(conn, owner, caller, namespace)
        if not held & COVERS[need]:
            raise Forbidden(
                f"No live grant of {owner} lets this wallet {need} namespace {namespace!r}",
                {"owner": owner, "namespace": namespace, "access": need},
            )
        return owner
