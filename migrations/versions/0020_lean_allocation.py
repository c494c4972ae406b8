"""Leaner allocation fast paths: hivenet.fake_now read only where a database allows a fake
clock, and fewer expression nodes (issue 13).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
