"""Run one statement on the caller's Connection or Session (sync or async), never committing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from sqlalchemy import Connection, Engine, Row, TextClause
from sqlalchemy.orm import Session

from hivenet_db.errors import translated

if TYPE_CHECKING:  # asyncio support needs greenlet: the optional extra "async"
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

SyncDB: TypeAlias = "Connection | Session"
AsyncDB: TypeAlias = "AsyncConnection | AsyncSession"


def rows(db: SyncDB, statement: TextClause, params: Mapping[str, Any]) -> Sequence[Row[Any]]:
    with translated():
        return db.execute(statement, params).all()


async def rows_async(
    db: AsyncDB, statement: TextClause, params: Mapping[str, Any]
) -> Sequence[Row[Any]]:
    with translated():
        result = await db.execute(statement, params)
        return result.all()


def engine_of(db: SyncDB) -> Engine:
    """The engine behind the caller's Connection or Session, for work that must commit on a
    connection of its own (durable allocation)."""
    bind = db.get_bind() if isinstance(db, Session) else db
    return bind if isinstance(bind, Engine) else bind.engine


def async_engine_of(db: AsyncDB) -> AsyncEngine:
    """``engine_of`` for an AsyncConnection or AsyncSession."""
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

    bind = db.bind if isinstance(db, AsyncSession) else db
    return bind if isinstance(bind, AsyncEngine) else bind.engine
