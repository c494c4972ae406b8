"""Failover fence: hivenet.fence_failover() moves every counter past what a lost primary may
have issued; maintain() fences an unfenced timeline and warns about asynchronous standbys.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
