"""The UPDATE that finishes an attempt is written once, in finish_request: resolving goes
through it, and _finish_attempt, its copy, gives way to _raise_unfinished, which only explains
why nothing was finished.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
