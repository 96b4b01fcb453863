"""Payments reconciled: a payment is recorded as pending before it settles, in its own
transaction, so a settlement whose work does not commit leaves a row to reconcile.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04

States (app/payments/reconcile.py):
- pending: recorded before settling; `tx_hash` set once the facilitator said it settled;
- settled: settled and its work committed (the request's transaction marked it);
- redeemable: settled on chain but its work never committed; the same proof with the same
  request gets the work done without a second charge.
A pending row whose settlement failed is deleted (nothing moved); one whose outcome is unknown
(a timeout, a killed process) waits for the reconciler, which asks the chain.
"""

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE payments DROP CONSTRAINT payments_status_check")
    op.execute(
        "ALTER TABLE payments ADD CONSTRAINT payments_status_check"
        " CHECK (status IN ('pending', 'settled', 'redeemable'))"
    )
    op.execute("ALTER TABLE payments ALTER COLUMN settle_response DROP NOT NULL")
    op.execute("ALTER TABLE payments ADD COLUMN valid_before timestamptz")
    op.execute("ALTER TABLE payments ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now()")
    op.execute("CREATE INDEX payments_pending ON payments (created_at) WHERE status = 'pending'")
    # x402's payment-identifier extension: the client's idempotency key, once per wallet
    op.execute("ALTER TABLE payments ADD COLUMN payment_identifier text")
    op.execute(
        "CREATE UNIQUE INDEX payments_by_identifier ON payments (wallet, payment_identifier)"
        " WHERE payment_identifier IS NOT NULL"
    )


def downgrade() -> None:
    op.execute("DELETE FROM payments WHERE status <> 'settled'")
    op.execute("DROP INDEX payments_by_identifier")
    op.execute("ALTER TABLE payments DROP COLUMN payment_identifier")
    op.execute("DROP INDEX payments_pending")
    op.execute("ALTER TABLE payments DROP COLUMN updated_at")
    op.execute("ALTER TABLE payments DROP COLUMN valid_before")
    op.execute("ALTER TABLE payments ALTER COLUMN settle_response SET NOT NULL")
    op.execute("ALTER TABLE payments DROP CONSTRAINT payments_status_check")
    op.execute(
        "ALTER TABLE payments ADD CONSTRAINT payments_status_check CHECK (status = 'settled')"
    )
