"""The database URL a tool is given (``--url``, else $HIVENET_DATABASE_URL) and the
short-lived engines and connections it runs on.

A tool's connections never prepare statements (psycopg's ``prepare_threshold=None``): the URL
may go through a pooler in transaction pooling (PgBouncer), whose server session outlives the
command and serves another client next, which must find no statement of ours there (PgBouncer
before 1.21 does not track them: ``prepared statement "_pg3_0" already exists``). A command
runs each statement a few times, so preparing would gain it nothing anyway.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Engine, create_engine, pool

from hivenet_db.poolers import UNPREPARED
from hivenet_db.urls import libpq_url, sqlalchemy_url

ENV_VAR = "HIVENET_DATABASE_URL"


def from_env(url: str | None = None) -> str | None:
    """The URL given, else $HIVENET_DATABASE_URL, else None (use the embedded server)."""
    return url or os.environ.get(ENV_VAR) or None


@contextmanager
def engine_for(url: str, prepared: bool = False) -> Iterator[Engine]:
    """A short-lived engine for one command or migration: no pool, disposed on exit. Its
    connections never prepare, unless ``prepared`` (the benchmark of the Python layer,
    measuring an application's connection to PostgreSQL itself)."""
    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool,
                           connect_args={} if prepared else UNPREPARED)
    try:
        yield engine
    finally:
        engine.dispose()


def connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """A psycopg connection for one command (``kwargs``: psycopg's, such as autocommit)."""
    return psycopg.connect(libpq_url(url), **UNPREPARED, **kwargs)
