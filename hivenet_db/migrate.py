"""Upgrade and downgrade a database with the packaged alembic migrations."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import text

from hivenet_db.dburl import engine_for

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
        with engine_for(url) as engine, engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {VERSION_TABLE}"))


def current(url: str) -> str | None:
    """The revision the database is at, or None before the first migration."""
    with engine_for(url) as engine, engine.connect() as conn:
        if conn.execute(text("SELECT to_regclass(:t)"), {"t": VERSION_TABLE}).scalar() is None:
            return None
        return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
