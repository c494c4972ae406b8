"""While the lanes wait for a fence (a dump restored onto a server of the other byte order), none
issues a serial: HN010 until the fence, which the fast path checks for free (a folded constant).

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
