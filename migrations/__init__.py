"""Alembic migrations of schema ``hivenet`` (packaged as ``hivenet_db.migrations``)."""
