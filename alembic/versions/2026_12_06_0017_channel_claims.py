"""Payment channels' claims and refunds (x402 batch-settlement): one row per channel per claim or
refund transaction, written before the transaction is sent.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06

The claimer (app/payments/claimer.py) writes a row `pending`, with the cumulative total the claim
sets on chain, and commits it before anything is sent; then `confirmed` with the transaction's
hash, or `failed`. A row left `pending` (a send with no answer, a process killed mid-flight) is
reconciled against the chain: claims are cumulative, so a pending row whose total is at or below
the channel's on-chain totalClaimed is confirmed, never sent again. At most one row per channel
is pending at a time (a partial unique index): two instances' claimers never both send for one
channel. `settled_at`/`settle_tx`: when the claimed funds were moved on to the receiver.
Keyed by the payer's wallet first, distributed with memories on Citus (as 0016's tables).
"""

from alembic import op
from app.db.distribution import distribute_if_citus

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# (table, distribution column, co-located with), as in 0016
DISTRIBUTED = [
    ("channel_claims", "wallet", "memories"),
]


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE channel_claims (
            wallet        text NOT NULL,
            channel_id    text NOT NULL,
            id            uuid NOT NULL DEFAULT gen_random_uuid(),
            kind          text NOT NULL CHECK (kind IN ('claim', 'refund')),
            cumulative    numeric(78, 0) NOT NULL CHECK (cumulative >= 0),
            refund_amount numeric(78, 0) NOT NULL DEFAULT 0 CHECK (refund_amount >= 0),
            refund_nonce  bigint,
            status        text NOT NULL CHECK (status IN ('pending', 'confirmed', 'failed')),
            tx_hash       text,
            error         text,
            settle_tx     text,
            settled_at    timestamptz,
            created_at    timestamptz NOT NULL DEFAULT now(),
            updated_at    timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (wallet, channel_id, id),
            FOREIGN KEY (wallet, channel_id) REFERENCES payment_channels (wallet, channel_id)
                ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX channel_claims_one_pending ON channel_claims (wallet, channel_id)"
        " WHERE status = 'pending'"
    )
    distribute_if_citus(op, DISTRIBUTED)


def downgrade() -> None:
    op.execute("DROP TABLE channel_claims")
