"""System-serial step state machine.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from alembic import op

from hivenet_db.schema import apply_parts

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_parts(op.get_bind(), "steps")


def downgrade() -> None:
    pass
