"""Explicit parameter markers shared by controllers (Litestar 3 drops inferred kinds)."""

from __future__ import annotations

from typing import Annotated, Any, TypeAlias

import asyncpg
from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from app.core.schemas import MAX_PAGE

# Any request, as hooks and exception handlers take it.
AnyRequest: TypeAlias = Request[Any, Any, Any]
# A request as WalletAuthMiddleware leaves it: `user` is the caller's lower-cased wallet address,
# or None on a paid route called without x-wallet-auth (the payment gate then answers 402).
# Public handlers (exclude_from_auth) get this type too but must not read `user`: it is unset.
MaybeWalletRequest: TypeAlias = Request[str | None, Any, State]
# A request that reached a wallet handler: the middleware refused it without a wallet (401) on a
# free route, and the payment gate did (402) on a paid one, so `user` is the wallet address.
WalletRequest: TypeAlias = Request[str, Any, State]

Conn: TypeAlias = NamedDependency[asyncpg.Connection]
Limit100: TypeAlias = Annotated[int, QueryParameter(ge=1, le=100)]
# A page of a read that MemoClaw's clients page through (list, search, core).
PageLimit: TypeAlias = Annotated[int, QueryParameter(ge=1, le=MAX_PAGE)]
# PostgreSQL's OFFSET is a bigint: a larger offset would fail in the driver (a 500), so it is a 422.
MAX_OFFSET = 2**63 - 1
Offset: TypeAlias = Annotated[int, QueryParameter(ge=0, le=MAX_OFFSET)]
