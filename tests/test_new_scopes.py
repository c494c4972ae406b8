"""Unprepared counter scopes without DDL in the caller's transaction: the format's cold
counter, and promotion to a sequence of the scope's own by maintain() or prepare_scope()."""

from __future__ import annotations

import random
import threading
from collections import defaultdict

import psycopg
import pytest

from tests.helpers import Connect, SetClock, in_parallel, scalar, wait_until_blocked

NEXT = ("SELECT hivenet.next_serial('unified', jsonb_build_object("
        "'system', 'C0001', 'module', 'A01', 'instance', %s::text))")


def seq(serial: str) -> int:
    return int(serial[-10:])


def test_new_scopes_share_the_cold_counter_until_maintain_gives_each_its_own(db: psycopg.Connection,
                                                                             fake_clock: SetClock
        ) -> None:
    fake_clock(db, "2026-11-23 10:00:00+00")
    a1, b1, a2 = scalar(db, NEXT, ("11",)), scalar(db, NEXT, ("12",)), scalar(db, NEXT, ("11",))
    assert [seq(a1), seq(b1), seq(a2)] == [1, 2, 3]  # one counter, unique and increasing
    assert scalar(db, "SELECT count(*) FROM hivenet.scope_pending") == 2  # once per scope
    db.execute("SELECT hivenet.maintain()")
    assert scalar(db, "SELECT count(*) FROM hivenet.scope_pending") == 0
    assert {r[0] for r in db.execute(
        "SELECT scope FROM hivenet.scope WHERE format <> 'time_id'")} == {  # time_id's: install
        "C0001A0111", "C0001A0112"}
    # Each continues after every value the cold counter issued in this period: no overlap.
    assert seq(scalar(db, NEXT, ("11",))) == seq(scalar(db, NEXT, ("12",))) == 4
    fake_clock(db, "2026-11-24 10:00:00+00")
    assert scalar(db, NEXT, ("11",)) == "C0001A0111202611240000000001"


def test_a_prepared_scope_starts_at_one(db: psycopg.Connection) -> None:
    db.execute("""SELECT hivenet.prepare_scope('unified',
                  '{"system": "C0001", "module": "A01", "instance": "21"}')""")
    assert seq(scalar(db, NEXT, ("21",))) == 1
    with pytest.raises(psycopg.Error, match="instance") as bad:
        db.execute("""SELECT hivenet.prepare_scope('unified',
                      '{"system": "C0001", "module": "A01", "instance": "0"}')""")
    assert bad.value.sqlstate == "HN001"


def test_two_promotions_of_one_scope_at_once(connect: Connect) -> None:
    """The second waits for the first's commit, then sees its sequence (not a stale "none")."""
    first, second = connect(autocommit=False), connect(autocommit=False)
    prepare = """SELECT hivenet.prepare_scope('unified',
                 '{"system": "C0001", "module": "A01", "instance": "22"}')"""
    second.execute("SELECT to_regclass('hivenet.\"seq_unified_C0001A0122\"')")  # cache "none"
    first.execute(prepare)
    done: list[BaseException | None] = []

    def run_second() -> None:
        try:
            second.execute(prepare)
            second.commit()
            done.append(None)
        except BaseException as error:
            done.append(error)

    waiter = threading.Thread(target=run_second)
    waiter.start()
    wait_until_blocked(connect(), second.info.backend_pid)
    first.commit()
    waiter.join(30)
    assert done == [None]
    assert seq(scalar(connect(), NEXT, ("22",))) == 1


def test_first_users_of_a_scope_never_wait_for_each_other(connect: Connect) -> None:
    holder, other = connect(autocommit=False), connect()
    first = scalar(holder, NEXT, ("31",))  # open transaction, first use of the scope
    other.execute("SET lock_timeout = '500ms'")
    assert scalar(other, NEXT, ("31",)) > first
    holder.rollback()
    assert scalar(other, NEXT, ("31",)) > first  # and the rolled-back number stays unused


def test_a_session_that_saw_no_sequence_sees_a_promotion_committed_since(connect: Connect) -> None:
    """The session caches "no such sequence"; without refreshing it, the open transaction
    would go on drawing from the cold counter after the scope's own sequence started, and
    issue the same serial as another session."""
    stale, admin, other = connect(), connect(), connect()
    first = scalar(other, NEXT, ("41",))  # committed: maintain() will promote the scope
    stale.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    before = scalar(stale, NEXT, ("41",))  # cold; the session now "knows" there is none
    admin.execute("SELECT hivenet.maintain()")  # promotes the scope and commits
    assert scalar(admin, "SELECT count(*) FROM hivenet.scope WHERE scope = 'C0001A0141'") == 1
    by_other = scalar(other, NEXT, ("41",))  # from the scope's own sequence
    by_stale = scalar(stale, NEXT, ("41",))
    stale.execute("COMMIT")
    assert len({first, before, by_other, by_stale}) == 4, "a serial was issued twice"
    assert by_stale > before


def test_promotion_raced_by_16_connections_issues_no_serial_twice(connect: Connect) -> None:
    """16 connections draw from eight new scopes in transactions of every length and both
    isolation levels while maintain() promotes them: no serial twice, and each connection
    sees every scope's serials increase."""
    conns = [connect() for _ in range(16)]  # transactions by BEGIN, with their level
    admin = connect()
    stop = threading.Event()
    promotions = 0

    def promote() -> None:
        nonlocal promotions
        while not stop.is_set():
            admin.execute("SELECT hivenet.maintain()")
            promotions += 1

    def work(conn: psycopg.Connection, barrier: threading.Barrier) -> list[tuple[str, str]]:
        rng = random.Random(id(conn))
        issued: list[tuple[str, str]] = []
        barrier.wait()
        for round_ in range(12):
            level = rng.choice(["READ COMMITTED", "REPEATABLE READ"])
            conn.execute(f"BEGIN ISOLATION LEVEL {level}")
            for _ in range(rng.randint(1, 8)):
                instance = f"{50 + rng.randint(0, 7):02d}"
                issued.append((instance, scalar(conn, NEXT, (instance,))))
            # Rolled-back numbers must stay unused too.
            conn.execute("ROLLBACK" if round_ % 4 == 3 else "COMMIT")
        return issued

    promoter = threading.Thread(target=promote)
    promoter.start()
    try:
        results = in_parallel(conns, work)
    finally:
        stop.set()
        promoter.join(60)
    serials = [serial for issued in results for _, serial in issued]
    assert len(serials) == len(set(serials)), "a serial was issued twice"
    for issued in results:
        last: dict[str, str] = defaultdict(str)
        for instance, serial in issued:
            assert serial > last[instance]
            last[instance] = serial
    assert promotions > 0
    assert scalar(admin, "SELECT count(*) FROM hivenet.scope WHERE scope LIKE 'C0001A01%'") > 0


def test_a_full_cold_counter_names_what_is_shared(db: psycopg.Connection, fake_clock: SetClock
        ) -> None:
    fake_clock(db, "2026-11-23 10:00:00+00")
    db.execute("""SELECT hivenet.define_format('tiny', '[{"field": "branch", "width": 2,
                  "charset": "digit"}, {"time": "YYYYMMDD"}, {"seq": 1, "reset": "day"}]')""")
    for branch in range(9):
        db.execute("SELECT hivenet.next_serial('tiny', jsonb_build_object('branch', %s::text))",
                   (f"{branch:02d}",))
    with pytest.raises(psycopg.Error,
                       match=r"cold counter of unprepared scopes \(scope '99'.*hivenet-db prepare"
                       ) as full:
        db.execute("""SELECT hivenet.next_serial('tiny', '{"branch": "99"}')""")
    assert full.value.sqlstate == "HN010"
