"""Seed 002's purchase flow on keyed requests (docs/guides/idempotency.md): place an order under the
client's request key, pay it under a pay id, and take the payment notification under its
notify id. Each call runs its effect at most once however often it is retried or redelivered,
and a repeat answers what the first call answered. Effect and record commit together."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, text

from hivenet_db import RequestRepository, SerialRepository

SCHEMA = (
    "CREATE TABLE purchase_order (order_id text PRIMARY KEY, item text, amount int, status text)",
    "CREATE TABLE payment (pay_id text PRIMARY KEY, order_id text REFERENCES purchase_order, "
    "amount int, status text)",
)


def place_order(engine: Engine, request_key: str, item: str, amount: int) -> dict[str, Any]:
    """The client retries with the same request key: one order, the same answer."""
    order = {"item": item, "amount": amount}
    with engine.begin() as conn, \
            RequestRepository(conn).request("orders", request_key, order) as run:
        if run.started:
            order_id = SerialRepository(conn).next_unified("C0001", "A01", "01")
            conn.execute(text("INSERT INTO purchase_order VALUES (:o, :i, :a, 'unpaid')"),
                         {"o": order_id, "i": item, "a": amount})
            run.response = {"order_id": order_id, "status": "unpaid"}
    return dict(run.response)


def pay(engine: Engine, pay_id: str, order_id: str, amount: int) -> dict[str, Any]:
    """Pay under a pay id (from the cashier page): a double click or a retry pays once."""
    payment = {"order_id": order_id, "amount": amount}
    with engine.begin() as conn, RequestRepository(conn).request("pay", pay_id, payment) as run:
        if run.started:
            conn.execute(text("INSERT INTO payment VALUES (:p, :o, :a, 'pending')"),
                         {"p": pay_id, "o": order_id, "a": amount})
            conn.execute(text("UPDATE purchase_order SET status = 'paying' "
                              "WHERE order_id = :o"), {"o": order_id})
            run.response = {"pay_id": pay_id, "status": "pending"}
    return dict(run.response)


def on_payment_notification(engine: Engine, notify_id: str, pay_id: str,
                            paid: bool) -> dict[str, Any]:
    """The payment provider's notification, delivered at least once: keyed by its notify id,
    the second delivery changes nothing and gets the first one's answer."""
    notification = {"pay_id": pay_id, "paid": paid}
    with engine.begin() as conn, \
            RequestRepository(conn).request("payment-notify", notify_id, notification) as run:
        if run.started:
            status = "paid" if paid else "payment_failed"
            order_id = conn.execute(
                text("UPDATE payment SET status = :s WHERE pay_id = :p RETURNING order_id"),
                {"s": status, "p": pay_id}).scalar_one()
            conn.execute(text("UPDATE purchase_order SET status = :s WHERE order_id = :o"),
                         {"s": status, "o": order_id})
            run.response = {"order_id": order_id, "status": status}
    return dict(run.response)
