"""Payment channels (x402 batch-settlement): a channel's state and the vouchers it was paid with.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06

A channel is opened by a deposit settled on chain; every later call on it is paid with a voucher
(an EIP-712-signed cumulative amount), accepted with no on-chain step (app/payments/channels.py).
Both tables are keyed by the payer's wallet first: the channel row is locked (`FOR UPDATE`) in
the request's transaction, so concurrent vouchers on one channel serialise across instances, and
the voucher row and the channel's new charged total commit with the work or not at all.
Amounts are token atomic units (uint256, hence numeric(78, 0)). `charged` is what Engram has
charged on the channel; `signed_max_claimable` and `signature` are its highest voucher, the most
a claim may take (a voucher may sign for more than the call's price, as in x402's scheme).
"""

from alembic import op
from app.db.distribution import distribute_if_citus

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

# (table, distribution column, co-located with), as in 0011
DISTRIBUTED = [
    ("payment_channels", "wallet", "memories"),
    ("channel_vouchers", "wallet", "memories"),
]


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE payment_channels (
            wallet                text NOT NULL CHECK (wallet ~ '^0x[0-9a-f]{40}$'),
            channel_id            text NOT NULL CHECK (channel_id ~ '^0x[0-9a-f]{64}$'),
            network               text NOT NULL,
            asset                 text NOT NULL,
            receiver              text NOT NULL,
            receiver_authorizer   text NOT NULL,
            payer_authorizer      text NOT NULL,
            withdraw_delay        integer NOT NULL,
            salt                  text NOT NULL,
            balance               numeric(78, 0) NOT NULL CHECK (balance >= 0),
            total_claimed         numeric(78, 0) NOT NULL DEFAULT 0,
            charged               numeric(78, 0) NOT NULL CHECK (charged <= balance),
            signed_max_claimable  numeric(78, 0) NOT NULL,
            signature             text NOT NULL,
            withdraw_requested_at bigint NOT NULL DEFAULT 0,
            refund_nonce          bigint NOT NULL DEFAULT 0,
            deposit_tx            text,
            created_at            timestamptz NOT NULL DEFAULT now(),
            updated_at            timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (wallet, channel_id)
        )
        """
    )
    op.execute(
        """
        CREATE TABLE channel_vouchers (
            wallet              text NOT NULL,
            channel_id          text NOT NULL,
            cumulative          numeric(78, 0) NOT NULL,
            charged_after       numeric(78, 0) NOT NULL,
            amount              numeric(78, 0) NOT NULL CHECK (amount > 0),
            signature           text NOT NULL,
            endpoint            text NOT NULL,
            request_id          text NOT NULL,
            request_fingerprint bytea NOT NULL,
            payment_identifier  text,
            response_status     integer,
            response_body       bytea,
            created_at          timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (wallet, channel_id, cumulative),
            FOREIGN KEY (wallet, channel_id) REFERENCES payment_channels (wallet, channel_id)
                ON DELETE CASCADE
        )
        """
    )
    op.execute(
        "CREATE UNIQUE INDEX channel_vouchers_by_identifier"
        " ON channel_vouchers (wallet, payment_identifier) WHERE payment_identifier IS NOT NULL"
    )
    distribute_if_citus(op, DISTRIBUTED)


def downgrade() -> None:
    op.execute("DROP TABLE channel_vouchers")
    op.execute("DROP TABLE payment_channels")
