"""The request owns the transaction: one yield dependency opens it, and only it commits.

Before committing, the request's charge is settled (a free-tier call consumed, or an x402
payment settled on chain and written to the ledger). If settling fails the transaction rolls
back and the client gets the error, so no work is kept unpaid; if the handler fails, nothing is
settled.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import asyncpg

from app.api.params import MaybeWalletRequest
from app.payments.gate import NO_CHARGE, PaymentGate


async def provide_transaction(
    request: MaybeWalletRequest,
) -> AsyncGenerator[asyncpg.Connection, None]:
    pool: asyncpg.Pool = request.app.state.pool
    gate: PaymentGate = request.app.state.payment_gate
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        charge = NO_CHARGE
        try:
            charge = await gate.authorize(request, conn)
            yield conn
            await gate.settle(request, conn, charge)
        except BaseException:
            await tx.rollback()
            raise
        else:
            await tx.commit()
        finally:
            await gate.release(charge)  # only after commit: a retry then finds the ledger row
