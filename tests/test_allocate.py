"""Allocation (allocate.sql, formats.sql): the behaviour the fast path must keep."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest
from psycopg.types.json import Jsonb

from hivenet_db import errors
from tests.helpers import wait_until_blocked

Connect = Callable[..., psycopg.Connection]
FakeClock = Callable[[psycopg.Connection, str], None]


def one(conn: psycopg.Connection, sql: str, *params: object) -> object:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def unified(conn: psycopg.Connection, system: str = "C0001", module: str = "A01",
            instance: str = "01") -> str:
    return str(one(conn, "SELECT hivenet.next_unified_serial(%s, %s, %s)",
                   system, module, instance))


def sqlstate_of(conn: psycopg.Connection, sql: str, *params: object) -> tuple[str, str]:
    with pytest.raises(psycopg.Error) as info:
        conn.execute(sql, params)
    return str(info.value.sqlstate), str(info.value.diag.message_primary)


def test_builtin_layouts(db: psycopg.Connection, fake_clock: FakeClock) -> None:
    fake_clock(db, "2015-07-10 13:14:15+00")
    assert unified(db) == "C0001A0101201507100000000001"
    assert unified(db) == "C0001A0101201507100000000002"
    assert one(db, "SELECT hivenet.next_system_serial('C0001','A01','01')") == \
        "C0001A010120150710000000000001"
    assert one(db, "SELECT hivenet.next_interface_serial('C0001','A01','01','T0002')") == \
        "C0001A0101T0002201507101314150000000001"
    assert one(db, "SELECT hivenet.next_serial('id_service', %s)",
               Jsonb({"recon_type": "01", "merchant": "123456789012", "shard": "07"})) == \
        "12345678901220150710" + "07" + "000001"
    assert one(db, "SELECT hivenet.next_serial('per_second', '{}')") == "15071013141500001"


def test_fields_by_name_and_by_position_share_the_counter(db: psycopg.Connection) -> None:
    a = unified(db)
    b = one(db, "SELECT hivenet.next_serial('unified', %s)",
            Jsonb({"instance": "01", "module": "A01", "system": "C0001"}))
    assert isinstance(b, str) and b[:10] == a[:10] and int(b[-10:]) == int(a[-10:]) + 1


def test_business_time_zone_not_session_zone(db: psycopg.Connection,
                                             fake_clock: FakeClock) -> None:
    db.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    db.execute("SET TimeZone = 'America/New_York'")
    fake_clock(db, "2026-03-01 20:00:00+00")  # 2026-03-02 04:00 in Shanghai
    assert unified(db)[10:18] == "20260302"


@pytest.mark.parametrize(("args", "needle"), [
    (("C001", "A01", "01"), "field system 'C001' must be 5 alnum characters"),
    (("C0001", "A-1", "01"), "field module 'A-1' must be 3 alnum characters"),
    (("C0001", "A01", "00"), "field instance '00' must be from 01 to 99"),
    (("C0001", "A01", "1"), "field instance '1' must be 2 digit characters"),
    (("C0001", "A01", None), "field instance is missing"),
    (("C 001", "A01", "01"), "field system 'C 001' must be 5 alnum"),
    (("C000\uff11", "A01", "01"), "field system 'C000\uff11' must be 5 alnum"),  # full-width 1
])
def test_bad_fields_name_the_field(db: psycopg.Connection, args: tuple[str | None, ...],
                                   needle: str) -> None:
    state, message = sqlstate_of(db, "SELECT hivenet.next_unified_serial(%s, %s, %s)", *args)
    assert (state, needle) == ("HN001", needle) and needle in message


def test_a_value_with_spaces_cannot_stand_for_two_fields(db: psycopg.Connection) -> None:
    # The one-match check joins the values with spaces; a space inside a value must not
    # make a missing value look present.
    state, message = sqlstate_of(db, "SELECT hivenet.next_unified_serial(%s, %s, %s)",
                                 "C0001", "A01 01", None)
    assert state == "HN001" and "module 'A01 01'" in message


@pytest.mark.parametrize(("fields", "needle"), [
    ({"system": "C0001", "module": "A01", "instance": "01", "colour": "red"},
     "has no field 'colour'"),
    ({"system": "C0001", "module": "A01"}, "field instance is missing"),
    (["C0001"], "fields must be a JSON object"),
])
def test_bad_fields_by_name(db: psycopg.Connection, fields: object, needle: str) -> None:
    state, message = sqlstate_of(db, "SELECT hivenet.next_serial('unified', %s)", Jsonb(fields))
    assert state == "HN001" and needle in message


def test_unknown_format_and_bad_count(db: psycopg.Connection) -> None:
    assert sqlstate_of(db, "SELECT hivenet.next_serial('nope', '{}')") == \
        ("HN001", "unknown format 'nope'")
    state, message = sqlstate_of(
        db, "SELECT hivenet.next_serials('per_second', '{}', 0)")
    assert state == "HN001" and "count 0" in message


def test_registry_enforced(db: psycopg.Connection) -> None:
    db.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'enforce_registry'")
    state, message = sqlstate_of(db, "SELECT hivenet.next_unified_serial('C0001','A01','01')")
    assert state == "HN002" and "C0001" in message
    db.execute("SELECT hivenet.register_system('C0001')")
    db.execute("SELECT hivenet.register_module('C0001', 'A01')")
    assert len(unified(db)) == 28


def test_period_reset_and_clock_going_back(db: psycopg.Connection,
                                           fake_clock: FakeClock) -> None:
    fake_clock(db, "2026-05-01 23:59:59+00")
    assert unified(db).endswith("202605010000000001")
    assert unified(db).endswith("202605010000000002")
    fake_clock(db, "2026-05-02 00:00:01+00")
    assert unified(db).endswith("202605020000000001")
    # The clock goes back: issuing continues in the latest period, never backwards.
    fake_clock(db, "2026-05-01 12:00:00+00")
    assert unified(db).endswith("202605020000000002")
    # Per-second reset, printed time follows the period.
    fake_clock(db, "2026-05-02 00:00:01.5+00")
    assert one(db, "SELECT hivenet.next_serial('per_second', '{}')") == "26050200000100001"
    fake_clock(db, "2026-05-02 00:00:00.5+00")
    assert one(db, "SELECT hivenet.next_serial('per_second', '{}')") == "26050200000100002"


def test_custom_format_with_literal_and_seq_in_the_middle(db: psycopg.Connection,
                                                          fake_clock: FakeClock) -> None:
    db.execute("""SELECT hivenet.define_format('order_no', '[
        {"literal": "OR-"}, {"field": "shop", "width": 4, "charset": "digit", "max": 5000},
        {"time": "YYMMDD"}, {"seq": 3, "reset": "day"}, {"literal": "_x"},
        {"field": "kind", "width": 1, "charset": "upper_alnum"}]')""")
    fake_clock(db, "2026-05-02 10:00:00+00")
    fields = Jsonb({"shop": "0042", "kind": "Q"})
    assert one(db, "SELECT hivenet.next_serial('order_no', %s)", fields) == \
        "OR-0042260502001_xQ"
    state, message = sqlstate_of(db, "SELECT hivenet.next_serial('order_no', %s)",
                                 Jsonb({"shop": "5001", "kind": "Q"}))
    assert state == "HN001" and "field shop '5001' must be from 0000 to 5000" in message
    parsed = one(db, "SELECT hivenet.parse_serial('OR-0042260502001_xQ', 'order_no')")
    assert parsed == {"format": "order_no", "shop": "0042", "kind": "Q", "date": "2026-05-02",
                      "seq": 1}


def test_exhaustion_and_borrowing(db: psycopg.Connection, fake_clock: FakeClock) -> None:
    for name, borrow in (("tiny", False), ("tiny_borrow", True)):
        db.execute("SELECT hivenet.define_format(%s, %s, %s)",
                   (name, Jsonb([{"time": "YYYYMMDD"}, {"seq": 1, "reset": "day"}]), borrow))
    fake_clock(db, "2026-05-02 10:00:00+00")
    serials = [one(db, "SELECT hivenet.next_serial('tiny', '{}')") for _ in range(9)]
    assert serials == [f"20260502{i}" for i in range(1, 10)]
    for _ in range(2):  # keeps failing, never spills into the next day
        state, message = sqlstate_of(db, "SELECT hivenet.next_serial('tiny', '{}')")
        assert state == "HN010" and "all 9 serials" in message
    fake_clock(db, "2026-05-03 00:00:00+00")
    assert one(db, "SELECT hivenet.next_serial('tiny', '{}')") == "202605031"
    fake_clock(db, "2026-05-02 10:00:00+00")
    got = [r[0] for r in db.execute(
        "SELECT hivenet.next_serials('tiny_borrow', '{}', 11)").fetchall()]
    assert got == [f"20260502{i}" for i in range(1, 10)] + ["202605031", "202605032"]


def test_batch_is_increasing(db: psycopg.Connection) -> None:
    got = [r[0] for r in db.execute(
        "SELECT hivenet.next_serials('unified', %s, 5)",
        (Jsonb({"system": "C0001", "module": "A01", "instance": "01"}),)).fetchall()]
    assert got == sorted(got) and len(set(got)) == 5


def test_first_use_rolled_back_is_never_reissued(connect: Connect) -> None:
    conn = connect(autocommit=False)
    first = unified(conn, "R0001")
    conn.rollback()
    again = unified(conn, "R0001")
    conn.commit()
    assert again != first and again[-10:] > first[-10:]


def test_python_repository_maps_errors(hivenet_engine: object) -> None:
    from hivenet_db import SerialRepository
    with hivenet_engine.connect() as conn:  # type: ignore[attr-defined]
        repo = SerialRepository(conn)
        assert repo.next_unified("C0001", "A01", "01").startswith("C0001A0101")
        with pytest.raises(errors.InvalidInput):
            repo.next_unified("C0001", "A01", "00")


def test_parallel_allocations_are_unique(connect: Connect, fake_clock: FakeClock) -> None:
    """8 connections allocate at once, across a period change: no serial twice."""
    threads, per_thread = 8, 50
    conns = [connect() for _ in range(threads)]
    for i, conn in enumerate(conns):
        # Half the threads are a day ahead: they drive the period reset while others allocate.
        fake_clock(conn, "2026-05-02 12:00:00+00" if i % 2 else "2026-05-01 12:00:00+00")
    unified(conns[0])  # first use (the scope's sequence) out of the timed part
    barrier = threading.Barrier(threads)
    results: list[list[str]] = [[] for _ in range(threads)]
    failures: list[BaseException] = []

    def work(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(per_thread):
                results[i].append(unified(conns[i]))
        except BaseException as exc:
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures
    everything = [s for r in results for s in r]
    assert len(set(everything)) == threads * per_thread
    for r in results:
        assert r == sorted(r)  # monotonic as each connection saw it


def test_setting_change_reaches_sessions_that_already_allocated(
        connect: Connect, fake_clock: FakeClock) -> None:
    """Settings are generated constants in allocation's cached plans: a change must reach a
    session that has used them already, when (and only when) the change commits."""
    worker, admin = connect(), connect(autocommit=False)
    fake_clock(worker, "2026-03-01 20:00:00+00")
    assert unified(worker)[10:18] == "20260301"
    admin.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    assert unified(worker)[10:18] == "20260301"  # not committed yet
    admin.commit()
    assert unified(worker)[10:18] == "20260302"
    admin.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'enforce_registry'")
    admin.commit()
    state, _ = sqlstate_of(worker, "SELECT hivenet.next_unified_serial('C0001','A01','01')")
    assert state == "HN002"


def test_format_defined_elsewhere_is_usable_at_once(connect: Connect) -> None:
    a, b = connect(), connect()
    unified(a)
    b.execute("""SELECT hivenet.define_format('plain', '[{"seq": 4, "reset": "never"}]')""")
    assert one(a, "SELECT hivenet.next_serial('plain', '{}')") == "0001"


def test_format_missing_from_the_constants_is_read_from_its_table(db: psycopg.Connection) -> None:
    # As after a define_format whose rewrite of the constants lost to a concurrent one.
    db.execute("""SELECT hivenet.define_format('plain', '[{"seq": 4, "reset": "never"}]')""")
    db.execute("ALTER TABLE hivenet.format DISABLE TRIGGER format_compile")
    db.execute("""SELECT hivenet.define_format('plain2', '[{"seq": 3, "reset": "never"}]')""")
    assert one(db, "SELECT hivenet._format_constant('plain2')") is None
    assert one(db, "SELECT hivenet.next_serial('plain2', '{}')") == "001"


def test_settings_change_needs_read_committed(connect: Connect) -> None:
    conn = connect(autocommit=False)
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    with pytest.raises(psycopg.Error) as info:
        conn.execute("UPDATE hivenet.setting SET value = 'UTC' WHERE name = 'time_zone'")
    assert info.value.sqlstate == "HN001" and "READ COMMITTED" in str(info.value)
    conn.rollback()
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # new formats: allowed
    conn.execute("""SELECT hivenet.define_format('plain', '[{"seq": 4, "reset": "never"}]')""")
    conn.commit()


def test_concurrent_define_format_waits_instead_of_failing(connect: Connect) -> None:
    """Two transactions defining formats: the second waits for the first (the rewrite of the
    constants is serialised), then both formats work."""
    first, second, watcher = connect(autocommit=False), connect(autocommit=False), connect()
    first.execute("""SELECT hivenet.define_format('one', '[{"seq": 4, "reset": "never"}]')""")
    pid = second.info.backend_pid
    done = threading.Event()

    def define_second() -> None:
        second.execute("""SELECT hivenet.define_format('two', '[{"seq": 5, "reset": "never"}]')""")
        second.commit()
        done.set()

    t = threading.Thread(target=define_second)
    t.start()
    wait_until_blocked(watcher, pid)
    assert not done.is_set()
    first.commit()
    t.join(10)
    assert done.is_set()
    assert one(watcher, "SELECT hivenet.next_serial('one', '{}')") == "0001"
    assert one(watcher, "SELECT hivenet.next_serial('two', '{}')") == "00001"
