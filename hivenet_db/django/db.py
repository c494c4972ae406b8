"""Django's database connection as the repositories take it.

Django's PostgreSQL backend on psycopg 3 holds a psycopg ``Connection``; the repositories
(``StepRepository``, ``RequestRepository``, ``ClaimRepository``, ``SerialRepository``...) run
their statements on it without committing. Inside ``transaction.atomic()`` (or a view under
``ATOMIC_REQUESTS``) Django has turned autocommit off, so those statements are part of the
block's transaction: the record and the effect commit, or roll back, together. Outside an
atomic block Django's connection is in autocommit and each statement commits alone.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections
from sqlalchemy.engine import URL

# What Django's get_connection_params passes to psycopg.connect that is not libpq's.
_NOT_LIBPQ = frozenset({"cursor_factory", "context", "prepare_threshold", "autocommit"})


def connection(using: str = DEFAULT_DB_ALIAS) -> psycopg.Connection[Any]:
    """The psycopg connection under Django's database ``using`` (connected if it was not),
    for a repository: ``StepRepository(connection())``."""
    wrapper = connections[using]
    wrapper.ensure_connection()
    raw = wrapper.connection
    if not isinstance(raw, psycopg.Connection):
        raise ImproperlyConfigured(
            f"hivenet_db.django needs Django's PostgreSQL backend on psycopg 3; database "
            f"{using!r} uses {wrapper.vendor} with {type(raw).__module__}.{type(raw).__name__}")
    return raw


def database_url(using: str = DEFAULT_DB_ALIAS) -> str:
    """A SQLAlchemy URL (``postgresql+psycopg://``, password included) of Django's database
    ``using`` as Django connects to it: the packaged migrations and the checks open
    connections of their own with it."""
    wrapper = connections[using]
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(f"hivenet_db.django needs PostgreSQL; database {using!r} "
                                   f"is {wrapper.vendor}")
    params = dict(wrapper.get_connection_params())
    port = params.pop("port", None)
    query = {name: str(value) for name, value in params.items()
             if name not in _NOT_LIBPQ | {"dbname", "user", "password", "host"}
             and isinstance(value, str | int)}
    return URL.create("postgresql+psycopg", username=params.get("user") or None,
                      password=params.get("password") or None,
                      host=params.get("host") or None, port=int(port) if port else None,
                      database=params.get("dbname") or None,
                      query=query).render_as_string(hide_password=False)


__all__ = ["connection", "database_url"]
