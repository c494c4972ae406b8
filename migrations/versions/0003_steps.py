"""System-serial step state machine.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
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
    # The views depend on the table and go with it.
    op.execute("DROP TABLE hivenet.step_attempt CASCADE")
    op.execute("DROP FUNCTION hivenet.begin_step, hivenet._begin_step_nowait, hivenet.finish_step, "
               "hivenet.resolve_step, hivenet._raise_stale_attempt, hivenet._step_lease, "
               "hivenet._maintain_steps")
    op.execute("DROP TYPE hivenet.step_state")
    op.execute("DELETE FROM hivenet.setting WHERE name IN ('step_lease', 'step_retention')")
