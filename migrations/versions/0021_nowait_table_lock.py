"""A nowait claim waits for a lock on the whole table before its own lock_timeout starts, so
that a maintain() creating a partition no longer reads as a claim in progress.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
