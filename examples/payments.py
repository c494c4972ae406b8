"""The application under test in docs/guides/testing.md: a provider booking a payment call."""

from __future__ import annotations

from sqlalchemy import Engine, text

from hivenet_db import InterfaceDedup, SerialRepository, StepRepository


def book_payment(engine: Engine, interface_serial: str, amount: int) -> str:
    """Refuse a replayed call (its interface serial), give the payment a system serial of
    ours, and book it once under that serial; returns the system serial."""
    with engine.begin() as conn:
        InterfaceDedup(conn).claim(interface_serial)  # DuplicateInterfaceSerial on a replay
        system_serial = SerialRepository(conn).next_system("D0001", "B01", "01")
        with StepRepository(conn).step(system_serial, {"amount": amount}) as step:
            if step.started:
                conn.execute(text("INSERT INTO payment (system_serial, amount) VALUES (:s, :a)"),
                             {"s": system_serial, "a": amount})
                step.response = {"booked": amount}
    return system_serial
