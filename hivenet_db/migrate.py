"""Upgrade and downgrade a database with the packaged alembic migrations."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, pool, text

from hivenet_db.dburl import sqlalchemy_url

VERSION_TABLE = "hivenet_alembic_version"


def _config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", "hivenet_db.migrations:")
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring schema ``hivenet`` to ``revision``; safe to run again (nothing to do)."""
    command.upgrade(_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Go back to ``revision``; ``base`` removes every hivenet object, version table included."""
    command.downgrade(_config(url), revision)
    if revision == "base":
        engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))
        engine.dispose()


def current(url: str) -> str | None:
    """The revision the database is at, or None before the first migration."""
    engine = create_engine(sqlalchemy_url(url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            if conn.execute(text("SELECT to_regclass(:t)"), {"t": VERSION_TABLE}).scalar() is None:
                return None
            return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    finally:
        engine.dispose()
