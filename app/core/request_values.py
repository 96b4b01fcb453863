"""Values a request carries between the layers that handle it (app/http/state.py types its state
with them): who acts for whom, the console's signed-in session, and a paid call's settlement.
They live here, below every feature, so the HTTP library and each feature can name them without
importing one another; the features that make them (agents, console, payments) fill them in.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from x402.schemas import SettleResponse

# The two headers that name an owner other than the caller: an agent key acting for the wallet
# that delegated to it (app/agents/), and a grantee reaching an owner's namespace (app/grants/).
WALLET_OWNER_HEADER = "x-wallet-owner"
MEMORY_OWNER_HEADER = "x-memory-owner"


@dataclass(frozen=True)
class Delegation:
    """A live delegation a request acts under: the agent calling and what it may do."""

    agent: str
    owner: str
    scopes: frozenset[str]
    namespaces: tuple[str, ...] | None  # None: every namespace


@dataclass(frozen=True)
class ConsoleSession:
    """The console's signed-in browser, as its cookie's session says."""

    wallet: str
    csrf_token: str
    expires_at: datetime

    def csrf_matches(self, submitted: str | None) -> bool:
        return bool(submitted) and hmac.compare_digest(self.csrf_token, str(submitted))


@dataclass(frozen=True)
class CapturedResponse:
    """The answer a paid call gave, kept with its payment for an idempotent replay."""

    status: int
    body: bytes


@dataclass(frozen=True)
class Settled:
    """A payment settled (or redeemed) for a request: its ledger row and its receipt."""

    payment_id: UUID
    receipt: SettleResponse
