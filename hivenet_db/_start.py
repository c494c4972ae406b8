"""A new step or keyed request started through its start view (steps.sql ``_step_start``,
requests.sql ``_request_start``): one INSERT whose rule writes the first attempt with the
owner's rights and no function call, and writes nothing when the key has an attempt or the
input is not the common case; then ``begin_step`` / ``begin_request`` decide.

Only where the database has the view: a PL/Proxy front (docs/plproxy.md) has the functions
alone, and a database not yet at revision 0023 (0024 for keyed requests) neither. Which it
is, is asked once per connection (``to_regclass``, in the caller's transaction) and kept
for the connection's life.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import psycopg
from sqlalchemy import TextClause, text
from sqlalchemy.orm import Session

from hivenet_db._execute import AsyncDB, SyncDB, rows, rows_async

_HAS_VIEW = text("SELECT to_regclass(:view) IS NOT NULL")
# The driver's connection → {view: whether its database has it}.
_VIEWS: weakref.WeakKeyDictionary[object, dict[str, bool]] = weakref.WeakKeyDictionary()


def _plain(params: Mapping[str, Any]) -> bool:
    """The options a start view leaves out are plain: either policy starts a new key alike,
    and nowait must not wait for a concurrent start, as the INSERT would."""
    return params["on_success"] in ("replay", "reject") and params["nowait"] is False


def _driver(db: SyncDB) -> object:
    if isinstance(db, psycopg.Connection):
        return db
    conn = db.connection() if isinstance(db, Session) else db
    return conn.connection.driver_connection


async def _driver_async(db: AsyncDB) -> object:
    from sqlalchemy.ext.asyncio import AsyncSession

    if isinstance(db, psycopg.AsyncConnection):
        return db
    conn = await db.connection() if isinstance(db, AsyncSession) else db
    return (await conn.get_raw_connection()).driver_connection


def started(db: SyncDB, view: str, insert: TextClause, params: Mapping[str, Any]) -> bool:
    """Whether ``insert`` (into ``view``) wrote the first attempt; False when the options are
    not plain or the database has no such view, without trying."""
    if not _plain(params):
        return False
    known = _VIEWS.setdefault(_driver(db), {})
    if view not in known:
        known[view] = bool(rows(db, _HAS_VIEW, {"view": view})[0][0])
    return known[view] and bool(rows(db, insert, params))


async def started_async(db: AsyncDB, view: str, insert: TextClause,
                        params: Mapping[str, Any]) -> bool:
    """``started`` on the async connections."""
    if not _plain(params):
        return False
    known = _VIEWS.setdefault(await _driver_async(db), {})
    if view not in known:
        known[view] = bool((await rows_async(db, _HAS_VIEW, {"view": view}))[0][0])
    return known[view] and bool(await rows_async(db, insert, params))
