"""Alembic environment of hivenet-db.

Standalone (``hivenet-db migrate``, or ``hivenet_db.tools.migrate.upgrade(url)``) the version table
is ``hivenet_alembic_version``, so it never collides with the application's own
``alembic_version``. Included as the ``hivenet`` branch of an application's tree, the
application's env.py runs these revisions and this file is not used.
"""

from __future__ import annotations

from alembic import context

from hivenet_db.tools.dburl import engine_for, from_env
from hivenet_db.tools.migrate import VERSION_TABLE

config = context.config
url = (config.attributes.get("url") or context.get_x_argument(as_dictionary=True).get("url")
       or from_env(config.get_main_option("sqlalchemy.url")))
if not url:
    raise SystemExit("no database URL: pass -x url=... or set HIVENET_DATABASE_URL")

# One transaction per revision: a revision may use a value an earlier one added to an enum
# (0.2.0 adds step_state 'expired'), which PostgreSQL refuses in the transaction that added it.
with engine_for(url) as engine, engine.connect() as conn:
    context.configure(connection=conn, version_table=VERSION_TABLE, transactional_ddl=True,
                      transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()
