"""When maintain() last ran: table hivenet.maintain_run, written at the end of every run.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
