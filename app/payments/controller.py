"""GET /v1/payments: the receipts of the payments that served the caller's wallet (whoever paid:
the ledger is kept by wallet, on one shard with its memories under Citus)."""

from __future__ import annotations

from litestar import Controller, get

from app.api.params import Conn, Limit100, Offset, WalletRequest
from app.kit.schemas import iso
from app.payments import repository
from app.payments.schemas import Payment, PaymentPage


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
                amount=str(r["amount"]),
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
        return PaymentPage(payments, total, limit, offset)
