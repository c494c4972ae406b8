"""The database URL a tool is given (``--url``, else $HIVENET_DATABASE_URL) and the
short-lived engine it runs on."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, pool

from hivenet_db.urls import sqlalchemy_url

ENV_VAR = "HIVENET_DATABASE_URL"


def from_env(url: str | None = None) -> str | None:
    """The URL given, else $HIVENET_DATABASE_URL, else None (use the embedded server)."""
    return url or os.environ.get(ENV_VAR) or None


@contextmanager
def engine_for(url: str) -> Iterator[Engine]:
    """A short-lived engine for one command or migration: no pool, disposed on exit."""
    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    try:
        yield engine
    finally:
        engine.dispose()
