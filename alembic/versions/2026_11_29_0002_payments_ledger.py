"""Payments ledger: one row per settled x402 payment; (network, asset, payer, nonce) is unique,
so a payment can be settled and served once, whatever the guards in front of it do.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE payments (
            id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            payer               text NOT NULL,
            wallet              text NOT NULL,
            nonce               text NOT NULL,
            network             text NOT NULL,
            asset               text NOT NULL,
            amount              numeric(78, 0) NOT NULL CHECK (amount > 0),
            pay_to              text NOT NULL,
            endpoint            text NOT NULL,
            request_id          text NOT NULL,
            request_fingerprint bytea NOT NULL,
            status              text NOT NULL CHECK (status IN ('settled')),
            tx_hash             text,
            settle_response     jsonb NOT NULL,
            response_status     integer,
            response_body       bytea,
            created_at          timestamptz NOT NULL DEFAULT now(),
            UNIQUE (network, asset, payer, nonce)
        )
        """
    )
    op.execute("CREATE INDEX payments_by_wallet ON payments (wallet, created_at DESC)")
    op.execute("CREATE INDEX payments_by_payer ON payments (payer, created_at DESC)")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS payments")
