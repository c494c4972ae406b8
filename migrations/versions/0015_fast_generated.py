"""The allocation fast path generated per format, with its constants written in (issue 13).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-23
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
