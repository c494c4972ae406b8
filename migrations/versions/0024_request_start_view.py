"""A new keyed request starts through view _request_start, whose rule writes its first attempt
with the owner's rights and no function call (the Python layer's begin, and begin_request's).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
