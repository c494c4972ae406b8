"""The five allocation guarantees of SPEC §2, each shown by a test that can fail."""

from __future__ import annotations

import collections
import datetime as dt
import threading
from typing import Any

import psycopg
import pytest

from tests.helpers import Connect, SetClock, in_parallel, scalar

UNIFIED = "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')"
CLIENTS = 16


def _day(n: int) -> str:
    return (dt.date(2026, 3, 1) + dt.timedelta(days=n)).isoformat() + " 12:00:00+00"


def _seqs_by_period(serials: list[str], period: slice, seq: slice) -> dict[str, list[int]]:
    by_period: dict[str, list[int]] = collections.defaultdict(list)
    for serial in serials:
        by_period[serial[period]].append(int(serial[seq]))
    return by_period


def test_unique_across_period_changes_and_each_period_starts_at_one(connect: Connect,
                                                                    fake_clock: SetClock) -> None:
    """16 connections allocate across 5 forced day changes: no duplicate, each day 1..N."""
    conns = [connect() for _ in range(CLIENTS)]

    def work(conn: psycopg.Connection, barrier: threading.Barrier) -> list[str]:
        out = []
        for day in range(5):
            barrier.wait()
            fake_clock(conn, _day(day))
            out += [scalar(conn, UNIFIED) for _ in range(20)]
        return out

    serials = [s for chunk in in_parallel(conns, work) for s in chunk]
    assert len(serials) == len(set(serials)) == CLIENTS * 5 * 20
    by_day = _seqs_by_period(serials, slice(10, 18), slice(18, 28))
    assert sorted(by_day) == [_day(d)[:10].replace("-", "") for d in range(5)]
    for seqs in by_day.values():
        # No rollback happened, so every number of the day is used exactly once.
        assert sorted(seqs) == list(range(1, CLIENTS * 20 + 1))


def test_dozens_of_resets_raced_by_16_connections(connect: Connect, fake_clock: SetClock) -> None:
    """The reset path is where races hide: 40 per-second periods, all 16 clients at once."""
    conns = [connect() for _ in range(CLIENTS)]
    base = dt.datetime(2026, 3, 1, 8, 0, 0, tzinfo=dt.UTC)

    def work(conn: psycopg.Connection, barrier: threading.Barrier) -> list[str]:
        out = []
        for second in range(40):
            barrier.wait()
            fake_clock(conn, (base + dt.timedelta(seconds=second)).isoformat())
            out += [scalar(conn, "SELECT hivenet.next_serial('per_second', '{}')")
                    for _ in range(3)]
        return out

    serials = [s for chunk in in_parallel(conns, work) for s in chunk]
    assert len(set(serials)) == len(serials) == CLIENTS * 40 * 3
    by_second = _seqs_by_period(serials, slice(0, 12), slice(12, 17))
    assert len(by_second) == 40
    for seqs in by_second.values():
        assert sorted(seqs) == list(range(1, CLIENTS * 3 + 1))


def _wait_free(conn: psycopg.Connection) -> None:
    conn.execute("SET lock_timeout = '200ms'")


def test_allocation_never_waits_for_an_open_transaction(connect: Connect, fake_clock: SetClock
        ) -> None:
    """An open transaction that just allocated, reset a period, or created the scope never
    makes another connection wait (lock_timeout 200 ms would fail it)."""
    holder, other = connect(autocommit=False), connect()
    _wait_free(other)
    fake_clock(other, _day(0))
    # First use of the scope inside the holder's open transaction.
    fake_clock(holder, _day(0))
    first = scalar(holder, UNIFIED)
    assert [scalar(other, UNIFIED) for _ in range(3)] > [first]
    # The holder performs the reset into day 1 and keeps its transaction open.
    fake_clock(holder, _day(1))
    assert scalar(holder, UNIFIED).endswith("0000000001")
    fake_clock(other, _day(1))
    assert scalar(other, UNIFIED).endswith("0000000002")
    # The other connection performs the next reset itself while the holder is still open.
    fake_clock(other, _day(2))
    assert scalar(other, UNIFIED)[10:18] == _day(2)[:10].replace("-", "")
    assert holder.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    holder.rollback()


@pytest.mark.parametrize("first_use", [True, False])
def test_numbers_of_a_rolled_back_transaction_are_never_reissued(connect: Connect, first_use: bool
        ) -> None:
    conn = connect(autocommit=False)
    before = [] if first_use else [scalar(conn, UNIFIED)]
    conn.commit()
    lost = [scalar(conn, UNIFIED) for _ in range(3)]
    conn.rollback()
    after = [scalar(conn, UNIFIED) for _ in range(3)]
    conn.commit()
    assert not set(lost) & set(after)
    assert min(after) > max(lost)
    assert sorted(before + lost + after) == before + lost + after


def test_clock_going_back_never_issues_a_smaller_serial(db: psycopg.Connection, fake_clock: SetClock
        ) -> None:
    fake_clock(db, _day(5))
    later = scalar(db, UNIFIED)
    fake_clock(db, _day(3))  # the clock went back two days
    after = [scalar(db, UNIFIED) for _ in range(3)]
    assert all(s > later for s in after)
    assert {s[10:18] for s in after} == {later[10:18]}  # issuing stays in the latest day


def test_per_second_clock_going_back(db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, "2026-03-01 08:00:10+00")
    later = scalar(db, "SELECT hivenet.next_serial('per_second', '{}')")
    fake_clock(db, "2026-03-01 08:00:04+00")
    earlier_clock = scalar(db, "SELECT hivenet.next_serial('per_second', '{}')")
    assert earlier_clock > later
    assert earlier_clock[:12] == "260301080010"


def test_exhaustion_raises_hn010_and_the_next_period_starts_over(db: psycopg.Connection,
                                                                 fake_clock: SetClock) -> None:
    db.execute("""SELECT hivenet.define_format('tiny', '[{"literal": "T"}, {"time": "YYYYMMDD"},
                  {"seq": 1, "reset": "day"}]')""")
    fake_clock(db, _day(0))
    issued = [scalar(db, "SELECT hivenet.next_serial('tiny', '{}')") for _ in range(9)]
    assert [s[-1] for s in issued] == list("123456789")
    for _ in range(3):  # keeps failing, and failing calls never spill into the next day
        with pytest.raises(psycopg.Error) as exc:
            db.execute("SELECT hivenet.next_serial('tiny', '{}')")
        assert exc.value.diag.sqlstate == "HN010"
        assert "tiny" in str(exc.value) and "9" in str(exc.value)
    fake_clock(db, _day(1))
    assert scalar(db, "SELECT hivenet.next_serial('tiny', '{}')") == "T" + _day(1)[:10].replace(
        "-", "") + "1"


def test_id_service_daily_capacity_is_bounded(db: psycopg.Connection, fake_clock: SetClock) -> None:
    fields = '{"merchant": "123456789012", "shard": "07"}'
    fake_clock(db, _day(0))
    db.execute("SELECT hivenet.prepare_scope('id_service', %s)", (fields,))
    # The whole day in one call: above the default per-call limit, within its maximum.
    db.execute("UPDATE hivenet.setting SET value = '1000000' WHERE name = 'max_serials_per_call'")
    last = scalar(db, "SELECT max(s) FROM hivenet.next_serials('id_service', %s, 999999) s",
                  (fields,))
    assert last.endswith("07999999")
    with pytest.raises(psycopg.Error) as exc:
        db.execute("SELECT hivenet.next_serial('id_service', %s)", (fields,))
    assert exc.value.diag.sqlstate == "HN010"


def test_borrowing_format_moves_into_the_next_period(db: psycopg.Connection, fake_clock: SetClock
        ) -> None:
    db.execute("""SELECT hivenet.define_format('lender', '[{"time": "YYYYMMDD"},
                  {"seq": 1, "reset": "day"}]', true)""")
    fake_clock(db, _day(0))
    serials = [scalar(db, "SELECT hivenet.next_serial('lender', '{}')") for _ in range(10)]
    assert serials[-1] == _day(1)[:10].replace("-", "") + "1"
    assert serials == sorted(serials) and len(set(serials)) == 10


@pytest.mark.parametrize(("utc", "expected"), [
    ("2026-11-20 15:59:59+00", "20261120"),  # 23:59:59 in Shanghai
    ("2026-11-20 16:00:00+00", "20261121"),  # midnight in Shanghai
])
def test_dates_follow_the_business_time_zone_not_the_session(db: psycopg.Connection,
                                                             fake_clock: SetClock, utc: Any,
                                                             expected: Any) -> None:
    db.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    db.execute("SET TimeZone = 'America/New_York'")
    fake_clock(db, utc)
    assert scalar(db, UNIFIED)[10:18] == expected
    interface = scalar(db, "SELECT hivenet.next_interface_serial('C0001','A01','01','D0001')")
    assert interface[15:23] == expected
