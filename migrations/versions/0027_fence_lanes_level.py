"""The failover fence moves every lane of a laned format past the greatest of them, so that a
scope drawing from another lane afterwards (a restore onto a server of the other byte order)
meets no value it was issued before; each fence records the server's lane hash, and a fence
recorded on the other byte order counts as none (maintain() fences then, as a backstop).

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-24
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, ".downgrade.sql")
