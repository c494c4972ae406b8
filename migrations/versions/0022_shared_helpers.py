"""One definition each for the request fingerprint and a lane's sequence, and begin_step's full
path checks the system serial once.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
