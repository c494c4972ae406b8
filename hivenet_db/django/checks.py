"""System checks (``manage.py check --database default``, and before ``migrate``): what the
database lacks for hivenet-db, each with the command that gives it.

Warnings, not errors: ``migrate`` runs the database checks before it migrates, and it is the
migration that installs the schema (and creates the roles, when its login may).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.core.checks import CheckMessage, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import connections

from hivenet_db.tools.bootstrap import ROLES

#: The app's status queries: missing roles, whether the schema exists, whether the login is
#: granted hivenet_app, and the revision the version table records (when readable).
_ROLES = "SELECT r FROM unnest(%s::text[]) AS r WHERE to_regrole(r) IS NULL"
_LOGIN = ("SELECT current_user, to_regnamespace('hivenet') IS NOT NULL, "
          "CASE WHEN to_regrole('hivenet_app') IS NOT NULL "
          "THEN pg_has_role('hivenet_app', 'USAGE') ELSE false END, "
          "to_regclass(%s) IS NOT NULL AND has_table_privilege(to_regclass(%s), 'SELECT')")


@register(Tags.database)
def check_database(databases: Sequence[str] | None = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    for alias in databases or ():
        if connections[alias].vendor == "postgresql":
            messages += _check(alias)
    return messages


def _check(alias: str) -> Iterable[CheckMessage]:
    from hivenet_db.tools import migrate

    with connections[alias].cursor() as cursor:
        cursor.execute(_ROLES, [list(ROLES)])
        missing = [row[0] for row in cursor.fetchall()]
        cursor.execute(_LOGIN, [migrate.VERSION_TABLE] * 2)
        user, installed, granted, readable = cursor.fetchone()
        revision = None
        if readable:
            cursor.execute(f"SELECT max(version_num) FROM {migrate.VERSION_TABLE}")
            revision = cursor.fetchone()[0]
    if missing:
        yield CheckWarning(
            f"database {alias!r}: the roles {', '.join(missing)} do not exist",
            hint="a superuser runs `hivenet-db bootstrap` once per cluster (or `manage.py "
                 "migrate hivenet` as a login that may create roles)", id="hivenet.W001")
    if not installed:
        yield CheckWarning(f"database {alias!r}: schema hivenet is not installed",
                           hint="`manage.py migrate hivenet` (or `hivenet-db migrate`) as "
                                "the schema's owner", id="hivenet.W002")
    elif readable and revision != migrate.head():
        yield CheckWarning(
            f"database {alias!r}: schema hivenet is at revision {revision}, this package's is "
            f"{migrate.head()}", hint="`hivenet-db migrate` as the schema's owner",
            id="hivenet.W002")
    if installed and not granted:
        yield CheckWarning(
            f"database {alias!r}: login {user} is not granted hivenet_app, so it may not call "
            "the hivenet functions", hint=f"GRANT hivenet_app TO {user}", id="hivenet.W003")
