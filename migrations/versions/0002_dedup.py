"""Interface-serial duplicate check and generic idempotency claims.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from alembic import op

from hivenet_db.schema import apply_parts

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_parts(op.get_bind(), "dedup", "claims")


def downgrade() -> None:
    pass
