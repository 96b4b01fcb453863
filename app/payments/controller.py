"""GET /v1/payments: the receipts of the payments that served the caller's wallet (whoever paid:
the ledger is kept by wallet, on one shard with its memories under Citus), and the x402 payment
channels the wallet paid through, with their latest vouchers and claims (up to `limit` each)."""

from __future__ import annotations

from asyncpg import Record
from litestar import Controller, get

from app.core.schemas import iso
from app.http.params import Conn, Limit100, Offset, WalletRequest
from app.payments import repository
from app.payments.schemas import (
    ChannelClaim,
    ChannelVoucher,
    Payment,
    PaymentChannel,
    PaymentPage,
)


class PaymentsController(Controller):
    path = "/v1/payments"
    tags = ["payments"]

    @get("/")
    async def list_payments(
        self, request: WalletRequest, conn: Conn, limit: Limit100 = 20, offset: Offset = 0
    ) -> PaymentPage:
        rows, total = await repository.list_for_wallet(conn, request.user, limit, offset)
        payments = [
            Payment(
                id=str(r["id"]),
                payer=r["payer"],
                wallet=r["wallet"],
                amount=str(int(r["amount"])),
                asset=r["asset"],
                network=r["network"],
                endpoint=r["endpoint"],
                nonce=r["nonce"],
                request_id=r["request_id"],
                status=r["status"],
                tx_hash=r["tx_hash"],
                created_at=iso(r["created_at"]),
            )
            for r in rows
        ]
        return PaymentPage(
            payments,
            total,
            limit,
            offset,
            channels=[
                _channel(r) for r in await repository.channels_of_wallet(conn, request.user, limit)
            ],
            vouchers=[
                _voucher(r) for r in await repository.recent_vouchers(conn, request.user, limit)
            ],
            claims=[_claim(r) for r in await repository.recent_claims(conn, request.user, limit)],
        )


def _channel(r: Record) -> PaymentChannel:
    return PaymentChannel(
        channel_id=r["channel_id"],
        network=r["network"],
        asset=r["asset"],
        receiver=r["receiver"],
        balance=str(int(r["balance"])),
        charged=str(int(r["charged"])),
        total_claimed=str(int(r["total_claimed"])),
        withdraw_requested_at=int(r["withdraw_requested_at"]),
        deposit_tx=r["deposit_tx"],
        created_at=iso(r["created_at"]),
        updated_at=iso(r["updated_at"]),
    )


def _voucher(r: Record) -> ChannelVoucher:
    return ChannelVoucher(
        channel_id=r["channel_id"],
        cumulative=str(int(r["cumulative"])),
        charged_after=str(int(r["charged_after"])),
        amount=str(int(r["amount"])),
        endpoint=r["endpoint"],
        request_id=r["request_id"],
        created_at=iso(r["created_at"]),
    )


def _claim(r: Record) -> ChannelClaim:
    return ChannelClaim(
        id=str(r["id"]),
        channel_id=r["channel_id"],
        kind=r["kind"],
        cumulative=str(int(r["cumulative"])),
        refund_amount=str(int(r["refund_amount"])),
        status=r["status"],
        tx_hash=r["tx_hash"],
        settle_tx=r["settle_tx"],
        created_at=iso(r["created_at"]),
        updated_at=iso(r["updated_at"]),
    )
