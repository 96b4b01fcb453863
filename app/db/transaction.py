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
from app.payments.gate import NO_CHARGE, AnyRequest, Charge, PaymentGate

# Set by a handler whose own writes are bookkeeping only (recall's access counts): its commit
# need not wait for the WAL flush. A crash in the next ~200 ms (wal_writer_delay) may then forget
# those counts and, at worst, the one free-tier call the request used; a recorded x402 payment
# always commits durably.
RELAXED_COMMIT_STATE = "relaxed_commit"


def relax_commit(request: AnyRequest) -> None:
    request.state[RELAXED_COMMIT_STATE] = True


def commit_may_be_relaxed(asked: bool, charge: Charge) -> bool:
    return asked and charge.kind != "x402"


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
            if commit_may_be_relaxed(bool(request.state.get(RELAXED_COMMIT_STATE)), charge):
                await conn.execute("SET LOCAL synchronous_commit = off")
        except BaseException:
            await tx.rollback()
            raise
        else:
            await tx.commit()
        finally:
            await gate.release(charge)  # only after commit: a retry then finds the ledger row
