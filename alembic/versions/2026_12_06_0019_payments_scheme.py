"""Payments: the x402 scheme a ledger row was paid with.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06

`exact` pays with an EIP-3009 authorization, whose nonce the token records; `upto` (variable-cost
calls, app/payments/upto.py) with a Permit2 permit, whose nonce Permit2 records. The reconciler
asks the chain about a pending row's nonce where its scheme keeps it. Every existing row is
`exact`. On Citus, ALTER TABLE on the distributed table reaches every shard.
"""

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "ALTER TABLE payments ADD COLUMN scheme text NOT NULL DEFAULT 'exact'"
        " CHECK (scheme IN ('exact', 'upto'))"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE payments DROP COLUMN scheme")
