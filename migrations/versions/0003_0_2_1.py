"""Release 0.2.1 (unreleased): the changes of schema hivenet since 0.2.0.

Its scripts 0003_0_2_1.sql and 0003_0_2_1.downgrade.sql are written by
``python -m hivenet_db.tools.revision`` from the schema files and the hand-written
.tables.sql and .data.sql parts beside them (CONTRIBUTING.md, "Changing SQL"). Frozen when
0.2.1 is released, as 0001 and 0002 are.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28
"""

from alembic import op

from hivenet_db.schema import apply_revision_sql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__)


def downgrade() -> None:
    apply_revision_sql(op.get_bind(), __file__, suffix=".downgrade.sql")
