"""Schema hivenet, by the package's own migrations (what ``hivenet-db migrate`` runs).

``hivenet_db.tools.migrate.upgrade`` on the same database, on a connection of its own: the
current schema stamped at head in ``hivenet_alembic_version`` on an empty database, else the
revisions it lacks, else nothing. So ``hivenet-db migrate`` before or after ``manage.py
migrate`` finds the work done, and a newer package's revisions run with ``hivenet-db
migrate`` (Django records this migration once). Unapplying it (``migrate hivenet zero``)
leaves the schema: its counters and records are not Django's to drop (``hivenet-db
downgrade`` does that).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from hivenet_db.django.db import database_url
    from hivenet_db.tools import migrate

    migrate.upgrade(database_url(schema_editor.connection.alias))


class Migration(migrations.Migration):
    initial = True
    atomic = False  # the schema commits on its own connection (alembic's transaction)
    dependencies = []
    operations = [migrations.RunPython(install, migrations.RunPython.noop, elidable=False)]
