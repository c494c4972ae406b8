"""Hostile input and load (issue 10, parts 4 and 6): input checks that answer HN001 where
PostgreSQL's own errors escaped, a per-call limit of next_serials (setting
max_serials_per_call), the application role's fake clock, and autovacuum settings that keep
the dead rows of the busy tables flat.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
