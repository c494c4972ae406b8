"""The purchase flow of examples/purchase_flow.py against a real PostgreSQL, every call made
twice as a retry or a redelivery would."""

from __future__ import annotations

import pytest
from purchase_flow import SCHEMA, on_payment_notification, pay, place_order
from sqlalchemy import Engine, text

from hivenet_db import RequestMismatch


@pytest.fixture(scope="session")
def hivenet_prepare() -> list[str]:
    """The channel the shop numbers its orders in, prepared in the template database."""
    return ["C0001 A01 01"]


@pytest.fixture
def engine(hivenet_engine: Engine) -> Engine:
    with hivenet_engine.begin() as conn:
        for statement in SCHEMA:
            conn.execute(text(statement))
    return hivenet_engine


def rows(engine: Engine, sql: str) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(row) for row in conn.execute(text(sql))]


def test_every_step_runs_once_and_repeats_get_the_first_answer(engine: Engine) -> None:
    first = place_order(engine, "req-7f3a", "P0001", 100)
    assert place_order(engine, "req-7f3a", "P0001", 100) == first  # the client's retry
    order_id = first["order_id"]
    assert pay(engine, "pay-1", order_id, 100) == {"pay_id": "pay-1", "status": "pending"}
    assert pay(engine, "pay-1", order_id, 100)["status"] == "pending"  # double click
    notified = on_payment_notification(engine, "notify-9", "pay-1", True)
    assert notified == {"order_id": order_id, "status": "paid"}
    assert on_payment_notification(engine, "notify-9", "pay-1", True) == notified  # redelivered
    assert rows(engine, "SELECT order_id, status FROM purchase_order") == [(order_id, "paid")]
    assert rows(engine, "SELECT pay_id, status FROM payment") == [("pay-1", "paid")]


def test_a_late_duplicate_notification_cannot_undo_the_payment(engine: Engine) -> None:
    order_id = place_order(engine, "req-1", "P0002", 5)["order_id"]
    pay(engine, "pay-2", order_id, 5)
    on_payment_notification(engine, "notify-1", "pay-2", True)
    with pytest.raises(RequestMismatch):  # the same notify id saying something else
        on_payment_notification(engine, "notify-1", "pay-2", False)
    assert rows(engine, "SELECT status FROM payment") == [("paid",)]


def test_a_failed_attempt_is_retried(engine: Engine) -> None:
    order_id = place_order(engine, "req-2", "P0003", 7)["order_id"]
    with engine.begin() as conn:  # a payment whose transaction fails is not recorded at all
        conn.execute(text("DROP TABLE payment CASCADE"))
    with pytest.raises(Exception, match="payment"):
        pay(engine, "pay-3", order_id, 7)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE payment (pay_id text PRIMARY KEY, order_id text, "
                          "amount int, status text)"))
    assert pay(engine, "pay-3", order_id, 7)["status"] == "pending"
