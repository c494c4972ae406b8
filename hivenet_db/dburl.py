"""Database URLs: users give libpq-style or SQLAlchemy-style; each consumer gets its own."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, pool

ENV_VAR = "HIVENET_DATABASE_URL"


def from_env(url: str | None = None) -> str | None:
    """The URL given, else $HIVENET_DATABASE_URL, else None (use the embedded server)."""
    return url or os.environ.get(ENV_VAR) or None


def sqlalchemy_url(url: str) -> str:
    """``postgresql://`` and ``postgres://`` become ``postgresql+psycopg://``."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def libpq_url(url: str) -> str:
    """``postgresql+psycopg://`` (any driver suffix) becomes ``postgresql://``."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.startswith("postgresql+"):
        return "postgresql://" + rest
    return url


@contextmanager
def engine_for(url: str) -> Iterator[Engine]:
    """A short-lived engine for one command or migration: no pool, disposed on exit."""
    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    try:
        yield engine
    finally:
        engine.dispose()
