"""One definition per serial layout: checks and positions generated from formats (issue 15).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-23
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
