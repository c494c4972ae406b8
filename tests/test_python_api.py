"""The Python layer: repositories on the caller's Connection or Session, never committing."""

from __future__ import annotations

import datetime as dt
import pickle

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

import hivenet_db
from hivenet_db import InvalidInput, SequenceExhausted, Serial, SerialRepository, parse_serial


def test_allocation_inside_the_callers_transaction(hivenet_engine):
    with hivenet_engine.connect() as conn:
        conn.execute(text("CREATE TABLE payment (serial text PRIMARY KEY)"))
        conn.commit()
        serial = SerialRepository(conn).next_unified("C0001", "A01", "01")
        conn.execute(text("INSERT INTO payment VALUES (:s)"), {"s": serial})
        conn.rollback()  # the repository did not commit: the payment row is gone
        assert conn.execute(text("SELECT count(*) FROM payment")).scalar() == 0
        again = SerialRepository(conn).next_unified("C0001", "A01", "01")
        assert again.seq > serial.seq  # the rolled-back number is a gap, not reused


def test_serial_is_a_str_with_parsed_fields(hivenet_engine):
    with Session(hivenet_engine) as session:
        repo = SerialRepository(session)
        unified = repo.next_unified("C0001", "A01", "01")
        interface = repo.next_interface("C0001", "A01", "01", "D0001")
        system = repo.next_system("C0001", "A01", "01")
        session.commit()
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


def test_generic_next_and_next_many(hivenet_engine):
    with hivenet_engine.begin() as conn:
        repo = SerialRepository(conn)
        one = repo.next("id_service", recon_type="01", merchant="123456789012", shard="01")
        many = repo.next_many("id_service", 5, recon_type="01", merchant="123456789012",
                               shard="01")
    assert one.shard == "01" and one.merchant == "123456789012"
    assert [s.seq for s in many] == [2, 3, 4, 5, 6]
    assert all(isinstance(s, Serial) for s in many)


def test_errors_are_typed_and_carry_the_sqlstate(hivenet_engine):
    with hivenet_engine.connect() as conn:
        with pytest.raises(InvalidInput, match="C001") as exc:
            SerialRepository(conn).next_unified("C001", "A01", "01")
        assert exc.value.sqlstate == "HN001"
        assert isinstance(exc.value, hivenet_db.HivenetError)
        conn.rollback()
        conn.execute(text("""SELECT hivenet.define_format('tiny', '[{"literal": "T"},
                             {"seq": 1, "reset": "never"}]')"""))
        SerialRepository(conn).next_many("tiny", 9)
        with pytest.raises(SequenceExhausted):
            SerialRepository(conn).next("tiny")


def test_parse_serial(hivenet_engine):
    with hivenet_engine.connect() as conn:
        parsed = parse_serial(conn, "C0001A0101201507100123456789")
        assert parsed.seq == 123456789 and parsed.date == dt.date(2015, 7, 10)
        with pytest.raises(InvalidInput, match="XYZ"):
            parse_serial(conn, "XYZ")


def test_durable_serial_is_committed_before_it_is_returned(hivenet_engine):
    with hivenet_engine.connect() as conn:
        durable = SerialRepository(conn).next_durable(
            "unified", system="C0001", module="A01", instance="01")
        conn.rollback()  # the caller's rollback cannot take it back
        after = SerialRepository(conn).next_unified("C0001", "A01", "01")
    assert durable.format == "unified" and after.seq == durable.seq + 1
