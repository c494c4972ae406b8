"""A new step starts through view _step_start, whose rule writes its first attempt with the
owner's rights and no function call (the Python layer's begin, and _begin_step's).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
