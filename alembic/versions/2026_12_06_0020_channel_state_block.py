"""Payment channels: the block a channel row's on-chain state is as new as.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06

The claimer reads each channel on chain and writes it into its row; a deposit (a top-up) writes
the state its settlement reported. A read begun before a top-up was mined would otherwise lower
the row's balance under the deposit it already records, and the next voucher be refused as above
the deposit. Each write now carries its block (the read's starting block, or the deposit's), and
an older one changes nothing (app/payments/repository.py `refresh_channel`).
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE payment_channels ADD COLUMN state_block bigint NOT NULL DEFAULT 0")


def downgrade() -> None:
    op.execute("ALTER TABLE payment_channels DROP COLUMN state_block")
