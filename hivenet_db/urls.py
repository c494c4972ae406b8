"""Database URL forms: users give libpq-style or SQLAlchemy-style URLs; libpq (psycopg,
pgbench, PL/Proxy) and SQLAlchemy each get their own."""

from __future__ import annotations


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
