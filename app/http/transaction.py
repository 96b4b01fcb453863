"""The request owns the transaction: one yield dependency opens it, and only it commits.

Before committing, the request's charge is settled (a free-tier call consumed, or an x402
payment settled on chain and written to the ledger). If settling fails the transaction rolls
back and the client gets the error, so no work is kept unpaid; if the handler fails, nothing is
settled.

Cancellation: Litestar resolves a handler's dependencies in an anyio task group, which cancels
the others when one fails, and anyio's cancellation hits every later `await` too. So the parts
that must finish once begun are shielded: the rollback and the release of a payment's in-flight
lock, and settle-then-commit (a payment settled on chain must reach the ledger). Dependencies
that check parameters run before the transaction opens (`transaction_after`), so a 422 never
cancels an open one.

One statement, no BEGIN: a free route whose handler runs a single SQL statement says so
(`opt=one_statement()`), and that statement runs as its own transaction, which PostgreSQL makes
atomic by itself. That saves the BEGIN and COMMIT round trips, two of the three a list page or a
read by id made (each round trip costs the event loop, PostgreSQL and the kernel more than
either statement does). A paid route always gets a transaction, whatever it declares: its charge
is settled inside it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

import anyio
import asyncpg
from asyncpg.transaction import Transaction

from app.core.errors import PartUnavailable
from app.db import settings_repository as db
from app.db.errors import CONNECT_FAILURES, DATABASE_DOWN
from app.http.markers import runs_as_one_statement
from app.http.params import AnyRequest, MaybeWalletRequest
from app.http.state import state_of

log = logging.getLogger("engram.payments")


class Charge(Protocol):
    """How one request is paid, as the payment gate decided (app/payments/gate.py)."""

    @property
    def kind(self) -> Literal["none", "free_call", "x402", "channel"]: ...


@dataclass(frozen=True)
class NoCharge:
    """A free route: nothing to pay."""

    kind: Literal["none"] = "none"


NO_CHARGE = NoCharge()


class PaymentGate(Protocol):
    """What the request's transaction asks of the payments feature, handed to it by the
    composition root (app/asgi.py puts app/payments/gate.py's Gate in `app.state.payment_gate`):
    charge before the work, settle before the commit, and clean up after."""

    async def authorize(self, request: AnyRequest, conn: asyncpg.Connection) -> Charge: ...

    async def settle(
        self, request: AnyRequest, conn: asyncpg.Connection, charge: Charge
    ) -> None: ...

    async def unfinished(self, request: AnyRequest, charge: Charge) -> None: ...

    async def release(self, charge: Charge) -> None: ...


def relax_commit(request: AnyRequest) -> None:
    """Said by a handler whose own writes are bookkeeping only (recall's access counts): its
    commit need not wait for the WAL flush. A crash in the next ~200 ms (wal_writer_delay) may
    then forget those counts and, at worst, the one free-tier call the request used; a recorded
    x402 payment always commits durably."""
    state_of(request.scope)["relaxed_commit"] = True


def commit_may_be_relaxed(
    asked: bool, charge_kind: Literal["none", "free_call", "x402", "channel"]
) -> bool:
    return asked and charge_kind not in ("x402", "channel")


async def rollback_unless_lost(conn: asyncpg.Connection, tx: Transaction) -> None:
    """Roll back, unless the connection is gone. A rollback that fails because the database
    dropped the connection (or asyncpg lost track of it in the drop) must not replace the error
    that brought the request here, which is the one to answer: asyncpg's own InterfaceError or
    InternalClientError over it would be a 500. The pool resets or closes the connection when
    it is released, so nothing of the transaction outlives the request."""
    try:
        if not connection_lost(conn):
            await tx.rollback()
    except (asyncpg.InterfaceError, asyncpg.InternalClientError, *DATABASE_DOWN) as exc:
        log.warning("rollback on a lost connection skipped: %r", exc)


def connection_lost(conn: asyncpg.Connection) -> bool:
    """The database closed this request's connection: asyncpg says it is closed, or has already
    taken it back into the pool (it does so when a connection closes under a request, and the
    request's connection is never released before the request ends)."""
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:  # "connection has been released back to the pool"
        return True


@contextmanager
def database_lost_is_503(conn: asyncpg.Connection) -> Iterator[None]:
    """A statement or a commit on a connection the database closed meanwhile: 503 like any
    outage, not the InterfaceError asyncpg raises for a closed or taken-back connection (a
    500)."""
    try:
        yield
    except asyncpg.InterfaceError as exc:
        if connection_lost(conn):
            raise PartUnavailable("database") from exc
        raise


@asynccontextmanager
async def request_transaction(request: MaybeWalletRequest) -> AsyncIterator[asyncpg.Connection]:
    pool: asyncpg.Pool = request.app.state.pool
    gate: PaymentGate = request.app.state.payment_gate
    try:
        conn: asyncpg.Connection = await pool.acquire()
    except CONNECT_FAILURES as exc:
        # nothing listens, or the pool cannot connect in time: a 503, before any work
        raise PartUnavailable("database") from exc
    if runs_as_one_statement(request.scope.get("route_handler")):
        async with _released(pool, conn):
            with database_lost_is_503(conn):
                await gate.authorize(request, conn)  # a free route: notes the free calls left
                yield conn
        return
    charge: Charge = NO_CHARGE
    state = state_of(request.scope)
    try:
        tx = conn.transaction()
        await tx.start()
        try:
            with database_lost_is_503(conn):
                charge = await gate.authorize(request, conn)
                yield conn
                with anyio.CancelScope(shield=True):
                    await gate.settle(request, conn, charge)
                    if commit_may_be_relaxed(state.get("relaxed_commit", False), charge.kind):
                        await db.commit_without_waiting_for_flush(conn)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await rollback_unless_lost(conn, tx)
            raise
        else:
            with anyio.CancelScope(shield=True), database_lost_is_503(conn):
                await tx.commit()  # no await between settle and here
    except BaseException:
        if "settled_payment" in state:
            # Settled, then failed before the commit ended (commit is the try's last step): only
            # the database lost at that moment does this. The money moved, the work did not
            # commit: the ledger row becomes redeemable (the same proof and request get the
            # work done without a second charge), or the reconciler finds it pending.
            with anyio.CancelScope(shield=True):
                await _keep_redeemable(gate, request, charge)
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await gate.release(charge)  # only after commit: a retry then finds the ledger row
            await pool.release(conn)


async def _keep_redeemable(gate: PaymentGate, request: MaybeWalletRequest, charge: Charge) -> None:
    try:
        await gate.unfinished(request, charge)
    except Exception:
        log.exception("payment settled but its work did not commit; left to the reconciler")


@asynccontextmanager
async def _released(pool: asyncpg.Pool, conn: asyncpg.Connection) -> AsyncIterator[None]:
    try:
        yield
    finally:
        with anyio.CancelScope(shield=True):
            await pool.release(conn)


async def provide_transaction(
    request: MaybeWalletRequest,
) -> AsyncGenerator[asyncpg.Connection, None]:
    async with request_transaction(request) as conn:
        yield conn
