"""Lean steps (issue 13): begin_step inlined, a replay without PL/pgSQL; one PL/pgSQL layer for a
new step and for its finish.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
