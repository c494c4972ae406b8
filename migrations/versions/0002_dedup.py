"""Interface-serial duplicate check and generic idempotency claims.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    # Dropping the tables takes their partitions and views along; functions go by name.
    op.execute("DROP TABLE hivenet.interface_call, hivenet.claim_record, hivenet.claim_namespace "
               "CASCADE")
    op.execute("DROP FUNCTION hivenet._interface_lock_space, hivenet._interface_partition_name, "
               "hivenet._create_interface_partition, hivenet._ensure_interface_partition, "
               "hivenet._reject_serial, "
               "hivenet.claim_interface_serial, hivenet.call_chain, "
               "hivenet._drop_interface_partition, hivenet._maintain_interface_calls, "
               "hivenet._claim_lock_space, hivenet.claim, hivenet.set_claim_expiry, "
               "hivenet._maintain_claims")
    op.execute("DELETE FROM hivenet.setting WHERE name LIKE 'interface%'")
