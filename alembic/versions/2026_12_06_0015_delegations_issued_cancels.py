"""Delegations carry the time their owner issued them; an owner may cancel a nonce.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06

A delegation registers only when issued after every earlier one of its owner to the same agent
(app/agents/service.py), so `issued_at` is kept for each; those registered before it get their
registration time. `delegation_cancels` holds the nonces an owner cancelled: a delegation signed
with one never registers. Like `delegations`, it is read by owner and written rarely: a
reference table on Citus. Namespaces of existing delegations are put in Unicode NFC, as every
other namespace is (the downgrade leaves them so: NFC is the same name).
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

REFERENCE = ["delegation_cancels"]


def upgrade() -> None:
    op.execute("ALTER TABLE delegations ADD COLUMN issued_at timestamptz")
    op.execute("UPDATE delegations SET issued_at = created_at")
    op.execute("ALTER TABLE delegations ALTER COLUMN issued_at SET NOT NULL")
    op.execute("CREATE INDEX delegations_issued ON delegations (owner, agent, issued_at)")
    op.execute(
        """
        CREATE TABLE delegation_cancels (
            owner         text NOT NULL CHECK (owner ~ '^0x[0-9a-f]{40}$'),
            nonce         text NOT NULL,
            cancelled_at  timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (owner, nonce)
        )
        """
    )
    bind = op.get_bind()
    # normalize() needs a UTF8 database (Engram's embedded one is); elsewhere names stay as sent
    if bind.exec_driver_sql("SHOW server_encoding").scalar() == "UTF8":
        op.execute(
            """
            UPDATE delegations
               SET namespaces = ARRAY(SELECT normalize(n, NFC)
                                      FROM unnest(namespaces) WITH ORDINALITY AS t(n, i)
                                      ORDER BY i)
             WHERE namespaces IS NOT NULL
               AND EXISTS (SELECT 1 FROM unnest(namespaces) AS t(n) WHERE n IS NOT NFC NORMALIZED)
            """
        )
    if bind.exec_driver_sql("SELECT 1 FROM pg_extension WHERE extname = 'citus'").scalar():
        with op.get_context().autocommit_block():
            for table in REFERENCE:
                op.execute(f"SELECT create_reference_table('{table}')")


def downgrade() -> None:
    op.execute("DROP TABLE delegation_cancels")
    op.execute("DROP INDEX delegations_issued")
    op.execute("ALTER TABLE delegations DROP COLUMN issued_at")
