"""What the app does around ``manage.py migrate``: schema hivenet before any other migration,
and the scopes of ``HIVENET["PREPARE"]`` after.

- **The schema first.** A migration of the project whose column defaults to a serial
  (``NextUnifiedSerial`` as a ``db_default``) needs schema hivenet; when the ``migrate`` that
  applies it also applies this app's ``0001_schema``, Django may order the two either way (it
  knows no dependency between them). So when ``0001_schema`` is in the plan, the schema is
  installed before the first migration runs, and ``0001_schema`` then finds it done: no
  migration needs a dependency on ``("hivenet", "0001_schema")``.
- **The scopes.** ``HIVENET = {"PREPARE": ["C0001 A01 01-99", ...]}``: each line as for
  ``hivenet-db prepare --file`` (hivenet_db/tools/scopes.py), prepared at the end of every
  ``migrate`` (those prepared already are left as they are), so that each counts from 1 from
  its first serial. The migrating login must own the schema or be granted hivenet_admin.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from hivenet_db.django.db import database_url
from hivenet_db.tools import migrate, scopes
from hivenet_db.tools.dburl import engine_for

SCHEMA = ("hivenet", "0001_schema")


def schema_first(using: str, plan: list[tuple[Any, bool]] | None = None, **_: Any) -> None:
    """``pre_migrate``: install the schema when this ``migrate`` applies ``0001_schema``."""
    if any((migration.app_label, migration.name) == SCHEMA and not backwards
           for migration, backwards in plan or ()):
        migrate.upgrade(database_url(using))


def prepare_scopes(using: str, **_: Any) -> None:
    """``post_migrate``: prepare the scopes of ``HIVENET["PREPARE"]`` (none by default)."""
    lines = getattr(settings, "HIVENET", {}).get("PREPARE", [])
    if isinstance(lines, str):
        raise ImproperlyConfigured('HIVENET["PREPARE"] is a list of lines, such as '
                                   '["C0001 A01 01-99"]')
    try:
        found = scopes.read(lines)
    except scopes.ScopeError as error:
        raise ImproperlyConfigured(f'HIVENET["PREPARE"]: {error}') from None
    if found:
        with engine_for(database_url(using)) as engine:
            scopes.prepare(engine, found)
