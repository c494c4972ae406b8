"""The Python layer: repositories on the caller's connection, never committing.

``any_conn`` runs each test once per connection kind: SQLAlchemy Connection, Session, and
plain psycopg 3 Connection (``async_kind`` does the same for the async kinds).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import pickle

import psycopg
import pytest

import hivenet_db
from hivenet_db import (
    AsyncSerialRepository,
    InvalidInput,
    SequenceExhausted,
    Serial,
    SerialRepository,
    flush_at_commit,
    flush_at_commit_async,
    parse_serial,
)
from hivenet_db._execute import SyncDB, conninfo_of
from tests.helpers import async_connection, run_sql, run_sql_async


def test_allocation_inside_the_callers_transaction(any_conn: SyncDB,
                                                  db: psycopg.Connection) -> None:
    db.execute("CREATE TABLE payment (serial text PRIMARY KEY)")  # the application's table
    db.execute("GRANT SELECT, INSERT ON payment TO hivenet_app")
    serial = SerialRepository(any_conn).next_unified("C0001", "A01", "01")
    run_sql(any_conn, "INSERT INTO payment VALUES (%(s)s)", s=serial)
    any_conn.rollback()  # the repository did not commit: the payment row is gone
    assert run_sql(any_conn, "SELECT count(*) FROM payment")[0][0] == 0
    again = SerialRepository(any_conn).next_unified("C0001", "A01", "01")
    assert again.seq > serial.seq  # the rolled-back number is a gap, not reused


def test_serial_is_a_str_with_parsed_fields(any_conn: SyncDB) -> None:
    repo = SerialRepository(any_conn)
    unified = repo.next_unified("C0001", "A01", "01")
    interface = repo.next_interface("C0001", "A01", "01", "D0001")
    system = repo.next_system("C0001", "A01", "01")
    any_conn.commit()
    assert isinstance(unified, str) and len(unified) == 28 and unified.startswith("C0001A0101")
    assert (unified.format, unified.system, unified.module, unified.instance, unified.seq) == (
        "unified", "C0001", "A01", "01", 1)
    assert isinstance(unified.date, dt.date) and unified.datetime is None
    assert interface.target == "D0001" and isinstance(interface.datetime, dt.datetime)
    assert interface.date == interface.datetime.date()
    assert system.format == "system" and len(system) == 30
    with pytest.raises(AttributeError, match="merchant"):
        _ = unified.merchant
    copy = pickle.loads(pickle.dumps(unified))
    assert copy == unified and copy.seq == 1 and copy.system == "C0001"


def test_generic_next_and_next_many(any_conn: SyncDB) -> None:
    repo = SerialRepository(any_conn)
    one = repo.next("id_service", merchant="123456789012", shard="05")
    many = repo.next_many("id_service", 5, merchant="123456789012",
                          shard="05")
    any_conn.commit()
    assert one.shard == "05" and one.merchant == "123456789012"
    assert [s.seq for s in many] == [2, 3, 4, 5, 6]
    assert all(isinstance(s, Serial) for s in many)


def test_errors_are_typed_and_carry_the_sqlstate(any_conn: SyncDB, db: psycopg.Connection
                                                 ) -> None:
    with pytest.raises(InvalidInput, match="C001") as exc:
        SerialRepository(any_conn).next_unified("C001", "A01", "01")
    assert exc.value.sqlstate == "HN001"
    assert isinstance(exc.value, hivenet_db.HivenetError)
    any_conn.rollback()
    db.execute("""SELECT hivenet.define_format('tiny', '[{"literal": "T"},
                  {"seq": 1, "reset": "never"}]')""")  # an administrator's
    SerialRepository(any_conn).next_many("tiny", 9)
    with pytest.raises(SequenceExhausted):
        SerialRepository(any_conn).next("tiny")


def test_parse_serial(any_conn: SyncDB) -> None:
    parsed = parse_serial("C0001A0101201507100123456789", db=any_conn)
    assert parsed.seq == 123456789 and parsed.date == dt.date(2015, 7, 10)
    with pytest.raises(InvalidInput, match="XYZ"):
        parse_serial("XYZ", db=any_conn)


def test_durable_serial_is_committed_before_it_is_returned(any_conn: SyncDB) -> None:
    durable = SerialRepository(any_conn).next_durable(
        "unified", system="C0001", module="A01", instance="01")
    any_conn.rollback()  # the caller's rollback cannot take it back
    after = SerialRepository(any_conn).next_unified("C0001", "A01", "01")
    assert durable.format == "unified" and after.seq == durable.seq + 1


FLUSHED = ("SELECT pg_current_xact_id_if_assigned() IS NOT NULL "
           "AND current_setting('synchronous_commit') = 'on'")


def test_flush_at_commit_takes_a_transaction_id_and_a_synchronous_commit(any_conn: SyncDB
                                                                          ) -> None:
    """What makes PostgreSQL flush the commit of a transaction that only drew serials
    (tests/test_crash.py shows why it matters), whatever the session's synchronous_commit."""
    run_sql(any_conn, "SET synchronous_commit = off")
    SerialRepository(any_conn).next_unified("C0001", "A01", "01")
    assert run_sql(any_conn, FLUSHED) == [(False,)]
    flush_at_commit(any_conn)
    assert run_sql(any_conn, FLUSHED) == [(True,)]
    any_conn.rollback()


def test_a_psycopg_connection_keeps_its_own_row_factory(hivenet_url: str) -> None:
    with psycopg.connect(hivenet_url, row_factory=psycopg.rows.dict_row) as conn:
        serial = SerialRepository(conn).next_unified("C0001", "A01", "01")
        assert serial.seq == 1 and conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}


def test_the_durable_connection_gets_the_password(hivenet_url: str) -> None:
    # info.dsn leaves the password out; the connection of its own needs it back.
    with psycopg.connect(hivenet_url, password="s3cr'et") as conn:
        assert "password" not in conn.info.dsn
        assert psycopg.conninfo.conninfo_to_dict(conninfo_of(conn))["password"] == "s3cr'et"


def test_async_allocation_and_durable(hivenet_app_url: str, async_kind: str) -> None:
    async def main() -> None:
        async with async_connection(async_kind, hivenet_app_url) as conn:
            repo = AsyncSerialRepository(conn)
            first = await repo.next_unified("C0001", "A01", "01")
            await conn.rollback()
            durable = await repo.next_durable("unified", system="C0001", module="A01",
                                              instance="01")
            await conn.rollback()
            [(now,)] = await run_sql_async(conn, "SELECT hivenet.now() IS NOT NULL")
            with pytest.raises(InvalidInput):
                await repo.next_unified("C001", "A01", "01")
            await conn.rollback()
            after = await repo.next_unified("C0001", "A01", "01")
            await run_sql_async(conn, "SET synchronous_commit = off")
            await flush_at_commit_async(conn)
            [(flushed,)] = await run_sql_async(conn, FLUSHED)
            await conn.rollback()
        assert now and durable.seq > first.seq and after.seq == durable.seq + 1 and flushed

    asyncio.run(main())


def test_every_public_name_is_exported_and_imported_on_first_use() -> None:
    """hivenet_db's names load lazily (the command's --version needs none of them): each name
    of __all__ has its home, resolves there, and importing the package loads no driver."""
    import importlib
    import subprocess
    import sys

    import hivenet_db

    assert sorted(hivenet_db.__all__) == sorted(hivenet_db._HOMES)
    for name in hivenet_db.__all__:
        assert name in vars(importlib.import_module(hivenet_db._HOMES[name]))
        assert getattr(hivenet_db, name) is not None
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, hivenet_db; print('sqlalchemy' in sys.modules, "
         "'psycopg' in sys.modules)"], capture_output=True, text=True, check=True).stdout
    assert loaded.split() == ["False", "False"]
