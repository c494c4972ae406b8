"""Serials in ORM models and Core statements: what the recipes of docs/guides/orm.md do, checked
in depth on models like the page's (tests/test_docs.py runs the page's blocks as written)."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, Integer, Text, func, insert, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.schema import CreateTable

from hivenet_db import InvalidInput, parse_serial
from hivenet_db.errors import translated
from hivenet_db.sqlalchemy import next_serial, next_serials, next_unified_serial


# --- docs/guides/orm.md: models ------------------------------------------------------------------
class Base(DeclarativeBase):
    pass


class Payment(Base):
    """The serial is the primary key, allocated by the database when the INSERT runs."""

    __tablename__ = "payment"
    serial: Mapped[str] = mapped_column(
        Text, primary_key=True,
        server_default=text("hivenet.next_unified_serial('C0001', 'A01', '01')"))
    amount: Mapped[int] = mapped_column(Integer)


class Order(Base):
    """The same with the package's function construct, for any format."""

    __tablename__ = "shop_order"
    serial: Mapped[str] = mapped_column(
        Text, primary_key=True,
        server_default=next_serial("id_service", merchant="123456789012",
                                   shard="01"))
    item: Mapped[str] = mapped_column(Text)


class Ticket(Base):
    """A serial that is not the key: filled in by the INSERT (a SQL expression default)."""

    __tablename__ = "ticket"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    serial: Mapped[str] = mapped_column(
        Text, unique=True, default=next_unified_serial("C0001", "A01", "02"))
# ------------------------------------------------------------------------------------------


@pytest.fixture
def engine(hivenet_engine: Engine) -> Engine:
    Base.metadata.create_all(hivenet_engine)
    return hivenet_engine


def test_the_serial_is_the_primary_key_after_flush(engine: Engine) -> None:
    with Session(engine) as session:
        first, second = Payment(amount=100), Payment(amount=200)
        session.add_all([first, second])
        session.flush()  # INSERT ... RETURNING serial: the key is known before the commit
        for payment in (first, second):
            parsed = parse_serial(payment.serial, db=session)
            assert (parsed.format, parsed.system, parsed.module, parsed.instance) == (
                "unified", "C0001", "A01", "01")
        assert second.serial > first.serial
        assert parse_serial(second.serial, db=session).seq > \
            parse_serial(first.serial, db=session).seq
        session.commit()
        assert session.get(Payment, first.serial) is first


def test_the_package_construct_as_server_default(engine: Engine) -> None:
    ddl = str(CreateTable(Base.metadata.tables["shop_order"]).compile(engine))
    assert ("DEFAULT hivenet.next_serial('id_service', CAST('{\"merchant\": \"123456789012\", "
            "\"shard\": \"01\"}' AS JSONB))") in ddl
    with Session(engine) as session:
        order = Order(item="apple")
        session.add(order)
        session.flush()
        parsed = parse_serial(order.serial, "id_service", db=session)
        assert (parsed.merchant, parsed.shard) == ("123456789012", "01")


def test_a_sql_expression_default_fills_a_column_that_is_not_the_key(engine: Engine) -> None:
    with Session(engine) as session:
        tickets = [Ticket(), Ticket(), Ticket()]
        session.add_all(tickets)
        session.flush()
        seqs = [parse_serial(t.serial, db=session).seq for t in tickets]
        assert seqs == sorted(set(seqs))
        assert all(t.serial.startswith("C0001A0102") for t in tickets)


def test_batch_allocation_in_insert_select(engine: Engine) -> None:
    with Session(engine) as session:
        # Core: one statement, one round trip, five rows each with its own serial.
        session.execute(insert(Payment).from_select(
            ["serial", "amount"],
            select(next_serials("unified", 5, system="C0001", module="A01", instance="01"),
                   text("0"))))
        # The same in SQL, pairing serials with your rows by position (WITH ORDINALITY).
        session.execute(text("""
            INSERT INTO payment (serial, amount)
            SELECT s.serial, a.amount
            FROM unnest(CAST(:amounts AS int[])) WITH ORDINALITY AS a(amount, i)
            JOIN hivenet.next_serials('unified',
                     '{"system": "C0001", "module": "A01", "instance": "01"}',
                     cardinality(CAST(:amounts AS int[])))
                 WITH ORDINALITY AS s(serial, i) USING (i)"""), {"amounts": [10, 20, 30]})
        rows = session.execute(select(Payment.serial, Payment.amount)
                               .order_by(Payment.serial)).all()
        assert [amount for _, amount in rows] == [0, 0, 0, 0, 0, 10, 20, 30]
        assert session.scalar(select(func.count(func.distinct(Payment.serial)))) == 8


def test_a_database_error_in_a_flush_becomes_the_library_exception(engine: Engine) -> None:
    class Other(DeclarativeBase):
        pass

    class Bad(Other):
        __tablename__ = "bad"
        serial: Mapped[str] = mapped_column(
            Text, primary_key=True, server_default=next_unified_serial("C001", "A01", "01"))

    Other.metadata.create_all(engine)
    with Session(engine) as session:
        session.add(Bad())
        with pytest.raises(InvalidInput, match="C001") as raised, translated():
            session.flush()
        assert raised.value.sqlstate == "HN001"
