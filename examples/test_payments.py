"""Testing book_payment against a real PostgreSQL with the hivenet_db.testing fixtures."""

from __future__ import annotations

import datetime as dt

import pytest
from payments import book_payment
from sqlalchemy import Engine, text

from hivenet_db import DuplicateInterfaceSerial, SerialOutsideWindow, parse_serial
from hivenet_db.testing import SetClock


@pytest.fixture(scope="session")
def hivenet_prepare() -> list[str]:
    """The channel book_payment allocates for, prepared in the template database (as
    `hivenet-db prepare D0001 B01 01` at deployment): one that is not prepared is refused."""
    return ["D0001 B01 01"]


@pytest.fixture
def engine(hivenet_engine: Engine, hivenet_app_engine: Engine, hivenet_clock: SetClock
           ) -> Engine:
    """The application's engine: a login granted only hivenet_app, as in production, on the
    test's database (at the package's head revision) with the application's table, on a fixed
    day: 1 March 2031, noon. The owner's engine sets up the table and its grant."""
    with hivenet_engine.begin() as conn:
        conn.execute(text("CREATE TABLE payment (system_serial text PRIMARY KEY, amount int)"))
        conn.execute(text("GRANT SELECT, INSERT ON payment TO hivenet_app"))
    hivenet_clock("2031-03-01 12:00:00+00")
    return hivenet_app_engine


def call(when: str, seq: int) -> str:
    """An interface serial as the caller C0001/A01/01 sends it to us (D0001)."""
    return f"C0001A0101D0001{when}{seq:010d}"


def test_a_call_is_booked_once(engine: Engine, hivenet_engine: Engine) -> None:
    serial = book_payment(engine, call("20310301115900", 1), 100)
    with engine.connect() as conn:
        parsed = parse_serial(serial, db=conn)
        assert (parsed.system, parsed.date) == ("D0001", dt.date(2031, 3, 1))  # the fake day
        assert parsed.seq == 1  # the channel's first serial of the day
        assert conn.execute(text("SELECT amount FROM payment")).scalar_one() == 100
    with hivenet_engine.connect() as conn:  # the reporting views: not the application's
        steps = conn.execute(text("SELECT state, steps FROM hivenet.step_states "
                                  "WHERE steps > 0")).all()
    assert [tuple(row) for row in steps] == [("success", 1)]


def test_a_replayed_call_is_refused_and_books_nothing(engine: Engine) -> None:
    book_payment(engine, call("20310301115900", 2), 100)
    with pytest.raises(DuplicateInterfaceSerial):
        book_payment(engine, call("20310301115900", 2), 100)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM payment")).scalar_one() == 1


def test_a_call_from_last_year_is_outside_the_window(engine: Engine) -> None:
    with pytest.raises(SerialOutsideWindow):
        book_payment(engine, call("20300301115900", 3), 100)
