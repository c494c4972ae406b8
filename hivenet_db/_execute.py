"""Run one statement on the caller's connection, never committing.

The caller's connection is a SQLAlchemy ``Connection`` or ``Session`` (sync or async) or a plain
psycopg 3 ``Connection`` / ``AsyncConnection``. Statements are written for the driver, with
psycopg's placeholders bound by name (``%(name)s``; the library's are in
``hivenet_db/queries/api.sql``, hivenet_db.statements), and sent as they are: straight to the
psycopg connection under SQLAlchemy's when nothing listens to SQLAlchemy's statements (no
cursor or error event listeners, no echo), after beginning SQLAlchemy's transaction as its
autobegin would, driver errors wrapped and a lost connection invalidated as SQLAlchemy does;
else through ``exec_driver_sql``, which keeps the events and logging but still skips
compiling a statement and, for a Session, the ORM's execution path. Async connections take
``exec_driver_sql``. psycopg prepares a statement run often unless the connection says
otherwise (``prepare_threshold=None``, as behind PgBouncer in transaction pooling).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.pq import Format
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import JsonbLoader
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from hivenet_db.errors import InvalidInput, from_database, translated

if TYPE_CHECKING:  # asyncio support needs greenlet: the optional extra "async"
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

SyncDB: TypeAlias = "Connection | Session | psycopg.Connection[Any]"
AsyncDB: TypeAlias = "AsyncConnection | AsyncSession | psycopg.AsyncConnection[Any]"
Rows: TypeAlias = Sequence[Sequence[Any]]

def _checked(params: Mapping[str, Any]) -> None:
    """InvalidInput (HN001) for a parameter PostgreSQL cannot take, instead of an error that is
    not one of ours: a string holding NUL, which text cannot hold (psycopg's DataError; JSON
    parameters are checked before they are dumped, by ``json_text``), and an int outside
    PostgreSQL's integer, the type of every count and attempt of the SQL API (psycopg would
    send a bigint, and no function takes one: 42883)."""
    for name, value in params.items():
        if isinstance(value, str) and "\x00" in value:
            raise InvalidInput(f"{name} holds a NUL character (character {value.index(chr(0)) + 1}"
                               f" of {len(value)}), which PostgreSQL text cannot")
        if isinstance(value, int) and not isinstance(value, bool) and not (
                -2**31 <= value < 2**31):
            raise InvalidInput(f"{name} {value} is out of range (a PostgreSQL integer)")


# A NUL in a string of the value, as json.dumps writes it: \u0000 after an even number of
# backslashes (an odd one is an escaped backslash followed by the text "u0000").
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


# One encoder for every call: json.dumps builds a new one whenever it is given an option.
_ENCODER = json.JSONEncoder(allow_nan=False)


def json_text(name: str, value: Any) -> str:
    """``value`` as a JSON parameter; InvalidInput (HN001) for what JSON or PostgreSQL cannot
    hold: NaN or Infinity (no JSON number; the database would answer 22P02), nesting deeper
    than Python can write (RecursionError), a string holding NUL."""
    try:
        text = _ENCODER.encode(value)
    except ValueError as error:
        raise InvalidInput(f"{name} holds NaN or Infinity, which JSON cannot ({error})") from None
    except RecursionError:
        raise InvalidInput(f"{name} is nested too deeply to be sent as JSON") from None
    # The expression reads the text character by character: only where an escape may be NUL.
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise InvalidInput(f"{name} holds a NUL character, which PostgreSQL text cannot")
    return text


_JSONB = psycopg.postgres.types["jsonb"].oid


def _json_values(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    """jsonb results as JSON values on a connection that loads them otherwise: Django's
    loads jsonb as text, for its JSONField to decode (a lookup per call elsewhere)."""
    loader = cursor.connection.adapters.get_loader(_JSONB, Format.TEXT)
    if loader is None or not issubclass(loader, JsonbLoader):
        cursor.adapters.register_loader(_JSONB, JsonbLoader)


def _cursor_rows(conn: psycopg.Connection[Any], sql: Any, params: Any) -> Rows:
    # tuple_row: the caller's connection may have another row factory (dict_row)
    with conn.cursor(row_factory=tuple_row) as cursor:
        _json_values(cursor)
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


async def _cursor_rows_async(conn: psycopg.AsyncConnection[Any], sql: Any, params: Any) -> Rows:
    async with conn.cursor(row_factory=tuple_row) as cursor:
        _json_values(cursor)
        await cursor.execute(sql, params)
        return await cursor.fetchall() if cursor.description else []


def _plain_driver(conn: Connection) -> psycopg.Connection[Any] | None:
    """The psycopg connection under ``conn`` when SQLAlchemy would run nothing per statement
    that anyone could see: no cursor-execute or error listeners, no echo. None otherwise.
    (``before_execute`` / ``after_execute`` never see driver SQL: SQLAlchemy fires them for
    ``Connection.execute`` only, not for ``exec_driver_sql``.)"""
    if (conn.engine.echo or conn.dispatch.before_cursor_execute
            or conn.dispatch.after_cursor_execute or conn.dialect.dispatch.handle_error):
        return None
    driver = conn.connection.driver_connection
    return driver if isinstance(driver, psycopg.Connection) else None


def rows(db: SyncDB, sql: str, params: Mapping[str, Any]) -> Rows:
    """The rows of ``sql`` (psycopg's placeholders, bound by name from ``params``) on the
    caller's connection (module docstring)."""
    _checked(params)
    with translated():
        if isinstance(db, psycopg.Connection):
            return _cursor_rows(db, sql, params)
        conn = db.connection() if isinstance(db, Session) else db
        driver = _plain_driver(conn)
        if driver is None:
            result = conn.exec_driver_sql(sql, params)
            return result.all() if result.returns_rows else []
        if not conn.in_transaction():
            conn.begin()  # what SQLAlchemy's autobegin does before a statement
        try:
            return _cursor_rows(driver, sql, params)
        except psycopg.Error as error:
            if from_database(error) is not None:
                raise  # one of ours: translated() maps it
            # Anything else as SQLAlchemy would raise it: wrapped in its DBAPIError, and a
            # lost connection invalidated (the pool then never hands it out again).
            lost = conn.dialect.is_disconnect(error, conn.connection, None)  # type: ignore[arg-type]
            if lost:
                conn.invalidate()
            raise DBAPIError.instance(sql, params, error, psycopg.Error,
                                      connection_invalidated=lost,
                                      dialect=conn.dialect) from error


async def rows_async(db: AsyncDB, sql: str, params: Mapping[str, Any]) -> Rows:
    """``rows`` for the async connections."""
    from sqlalchemy.ext.asyncio import AsyncSession

    _checked(params)
    with translated():
        if isinstance(db, psycopg.AsyncConnection):
            return await _cursor_rows_async(db, sql, params)
        conn = await db.connection() if isinstance(db, AsyncSession) else db
        result = await conn.exec_driver_sql(sql, params)
        return result.all() if result.returns_rows else []


def mappings(db: SyncDB, sql: str) -> list[dict[str, Any]]:
    """The rows of ``sql`` (no parameters) by column name: read-only queries (metrics)."""
    with translated():
        if isinstance(db, psycopg.Connection):
            # dict_row on a cursor of our own: the caller's connection may use another factory
            with db.cursor(row_factory=dict_row) as cursor:
                _json_values(cursor)
                return list(cursor.execute(sql, {}))  # parsed as rows' are: % is %%
        conn = db.connection() if isinstance(db, Session) else db
        return [dict(row) for row in conn.exec_driver_sql(sql, {}).mappings()]


def driver_of(db: SyncDB) -> psycopg.Connection[Any]:
    """The psycopg connection under the caller's SQLAlchemy Connection or Session (or itself):
    which database it is connected to, and as whom (durable allocation's own connections)."""
    if isinstance(db, psycopg.Connection):
        return db
    conn = db.connection() if isinstance(db, Session) else db
    driver = conn.connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    return driver


async def driver_of_async(db: AsyncDB) -> psycopg.AsyncConnection[Any]:
    """``driver_of`` for an AsyncConnection or AsyncSession, or a psycopg AsyncConnection."""
    if isinstance(db, psycopg.AsyncConnection):
        return db
    from sqlalchemy.ext.asyncio import AsyncSession

    conn = await db.connection() if isinstance(db, AsyncSession) else db
    driver = (await conn.get_raw_connection()).driver_connection
    assert isinstance(driver, psycopg.AsyncConnection)
    return driver


def conninfo_of(db: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> str:
    """Connection string for another connection like ``db``: ``info.dsn`` leaves the password
    out, so it is added back from ``info.password`` (which libpq also fills from a passfile)."""
    return make_conninfo(db.info.dsn, password=db.info.password)


__all__ = ["AsyncDB", "Rows", "SyncDB", "conninfo_of", "driver_of", "driver_of_async",
           "json_text", "mappings", "rows", "rows_async"]
