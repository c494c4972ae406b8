"""Scopes that are not prepared: refused with the defaults (HN002, naming the scope and the
command that prepares it), or drawn from their format's shared fallback counter where the
format opts in; a scope prepared before its first use counts from 1 whatever other scopes
drew, and one prepared after it drew continues after the fallback (fallback.sql)."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from pathlib import Path

import psycopg

from tests.command import in_process
from tests.helpers import (
    Connect,
    SetClock,
    eventually,
    failure,
    in_parallel,
    scalar,
    share_fallback,
    sqlstate_of,
    wait_until_blocked,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "guides" / "formats.md"
NEXT = ("SELECT hivenet.next_serial('unified', jsonb_build_object("
        "'system', 'C0001', 'module', 'A01', 'instance', %s::text))")
PREPARE = ("SELECT hivenet.prepare_scope('unified', jsonb_build_object("
           "'system', 'C0001', 'module', 'A01', 'instance', %s::text))")


def seq(serial: str) -> int:
    return int(serial[-10:])


def test_an_unprepared_scope_is_refused_naming_it_and_how_to_prepare_it(
        db: psycopg.Connection, hivenet_url: str) -> None:
    """The message docs/guides/formats.md prints, for every way to allocate the standard's
    kinds; a format's own fields otherwise; and the commands it names work."""
    channel = "{\"system\": \"C0009\", \"module\": \"A01\", \"instance\": \"01\"}"
    for kind, sql in (("unified", f"SELECT hivenet.next_serial('unified', '{channel}')"),
                      ("unified", "SELECT hivenet.next_unified_serial('C0009', 'A01', '01')"),
                      ("system", "SELECT hivenet.next_system_serial('C0009', 'A01', '01')"),
                      ("interface", "SELECT hivenet.next_interface_serial('C0009', 'A01', "
                                    "'01', 'B0001')")):
        code, message = failure(db, sql)
        assert code == "HN002", message
        assert message == (
            f"format {kind} has no counter for system 'C0009', module 'A01', instance '01': a "
            f"scope counts on a counter of its own, prepared before its first use; prepare it "
            f"with `hivenet-db prepare {kind} C0009 A01 01` or SELECT hivenet.prepare_scope("
            f"'{kind}', '{channel}')")
        if kind == "unified":
            assert message in DOC.read_text(encoding="utf-8")
    code, message = failure(db, "SELECT hivenet.next_serial('id_service', %s)",
                            (json.dumps({"merchant": "999999999998", "shard": "05"}),))
    assert code == "HN002" and "`hivenet-db prepare id_service merchant=999999999998,shard=05`" \
        in message, message
    # Nothing was made or recorded by the refusals; the command the message names works.
    assert scalar(db, "SELECT count(*) FROM hivenet.scope WHERE scope LIKE 'C0009%'") == 0
    assert scalar(db, "SELECT count(*) FROM hivenet.fallback_draw") == 0
    done = in_process("prepare", "unified", "C0009", "A01", "01", "--url", hivenet_url)
    assert done.returncode == 0, done.stderr
    assert scalar(db, "SELECT hivenet.next_unified_serial('C0009', 'A01', '01')").endswith(
        "0000000001")


def test_16_first_users_are_all_refused_at_once(connect: Connect) -> None:
    """Concurrent first calls of one unprepared scope: each refused, none waiting for another
    (lock_timeout), nothing created."""
    conns = [connect() for _ in range(16)]
    for conn in conns:
        conn.execute("SET lock_timeout = '2s'")

    def work(conn: psycopg.Connection, barrier: threading.Barrier) -> list[str | None]:
        barrier.wait()
        states: list[str | None] = []
        for _ in range(5):
            try:
                conn.execute(NEXT, ("42",))
                states.append(None)
            except psycopg.Error as error:
                states.append(sqlstate_of(error))
        return states

    assert {s for states in in_parallel(conns, work) for s in states} == {"HN002"}
    assert scalar(conns[0], "SELECT count(*) FROM hivenet.scope WHERE scope LIKE '%42'") == 0


def test_prepare_under_concurrent_allocation(connect: Connect) -> None:
    """Eight connections keep asking for a scope while an administrator prepares it: refused
    before the prepare commits, then counted on the scope's own sequence from 1, every serial
    once, increasing on each connection."""
    conns = [connect() for _ in range(8)]
    admin = connect()
    prepared = threading.Event()

    def work(conn: psycopg.Connection, barrier: threading.Barrier) -> tuple[int, list[str]]:
        refused = 0
        issued: list[str] = []
        barrier.wait()
        deadline = time.monotonic() + 60
        while len(issued) < 30 and time.monotonic() < deadline:
            try:
                issued.append(scalar(conn, NEXT, ("43",)))
            except psycopg.Error as error:
                assert sqlstate_of(error) == "HN002"
                assert not prepared.is_set() or not issued, "refused once prepared"
                refused += 1
        return refused, issued

    def prepare() -> None:
        time.sleep(0.2)
        admin.execute(PREPARE, ("43",))
        prepared.set()

    preparer = threading.Thread(target=prepare)
    preparer.start()
    results = in_parallel(conns, work)
    preparer.join(30)
    serials = [s for _, issued in results for s in issued]
    assert sum(refused for refused, _ in results) > 0
    assert len(serials) == len(set(serials)) == 240
    assert sorted(seq(s) for s in serials) == list(range(1, 241))
    for _, issued in results:
        assert issued == sorted(issued)


def test_with_the_fallback_a_scope_prepared_before_use_counts_from_1_while_others_draw(
        connect: Connect) -> None:
    """Eight connections draw from the fallback for unprepared scopes (some in transactions
    of several draws) while scopes are prepared: a prepared scope that never drew counts
    from 1, one that drew continues after the fallback, and no serial comes twice."""
    admin = connect()
    share_fallback(admin, "unified")
    drawn_before = scalar(admin, NEXT, ("44",))  # scope 44 drew: it continues after
    conns = [connect() for _ in range(8)]
    stop = threading.Event()

    def draw(conn: psycopg.Connection, barrier: threading.Barrier) -> list[str]:
        rng = random.Random(id(conn))
        issued: list[str] = []
        barrier.wait()
        while not stop.is_set():
            with conn.transaction():
                for _ in range(rng.randint(1, 3)):
                    issued.append(scalar(conn, NEXT, (f"{60 + rng.randint(0, 9)}",)))
        return issued

    results: list[list[str]] = []
    drawer = threading.Thread(target=lambda: results.extend(in_parallel(conns, draw)))
    drawer.start()
    try:
        time.sleep(0.3)
        for instance in ("45", "46"):
            admin.execute(PREPARE, (instance,))
        before = scalar(admin, "SELECT last_value FROM hivenet.cold_unified") % 10**11
        admin.execute(PREPARE, ("44",))
    finally:
        time.sleep(0.2)
        stop.set()
        drawer.join(60)
    assert seq(scalar(admin, NEXT, ("45",))) == 1
    assert seq(scalar(admin, NEXT, ("46",))) == 1
    after = scalar(admin, NEXT, ("44",))
    assert after > drawn_before and seq(after) > before  # after the fallback's count
    serials = [s for issued in results for s in issued]
    assert len(serials) == len(set(serials)) and len(serials) > 50


def test_a_rolled_back_draw_makes_a_later_prepare_start_after_the_fallback(
        connect: Connect) -> None:
    """Which scope a rolled-back draw printed is known nowhere: every scope prepared later in
    the period starts after the fallback's count (guarantee 2: that serial never comes
    again)."""
    admin, app = connect(), connect(autocommit=False)
    share_fallback(admin, "unified")
    assert seq(scalar(admin, NEXT, ("47",))) == 1  # committed, recorded
    admin.execute(PREPARE, ("48",))
    assert seq(scalar(admin, NEXT, ("48",))) == 1  # every draw accounted for: from 1
    rolled_back = scalar(app, NEXT, ("49",))
    app.rollback()
    admin.execute(PREPARE, ("49",))
    admin.execute(PREPARE, ("50",))
    assert seq(scalar(admin, NEXT, ("49",))) > seq(rolled_back)
    assert seq(scalar(admin, NEXT, ("50",))) > seq(rolled_back)


def test_the_next_period_counts_from_1_after_a_rolled_back_draw(db: psycopg.Connection,
                                                                connect: Connect,
                                                                fake_clock: SetClock) -> None:
    share_fallback(db, "unified")
    app = connect(autocommit=False)
    for conn in (db, app):
        fake_clock(conn, "2026-11-23 10:00:00+00")
    app.commit()
    assert seq(scalar(app, NEXT, ("51",))) == 1
    app.rollback()
    db.execute(PREPARE, ("51",))
    assert seq(scalar(db, NEXT, ("51",))) == 2
    fake_clock(db, "2026-11-24 10:00:00+00")
    db.execute(PREPARE, ("52",))
    assert seq(scalar(db, NEXT, ("52",))) == seq(scalar(db, NEXT, ("51",))) == 1


def test_prepare_waits_for_a_draw_in_flight_then_knows_whose_it_was(connect: Connect) -> None:
    """A draw in an open transaction: prepare waits for it (at most a second), and once it
    commits the scopes that did not draw start at 1."""
    admin, holder, observer = connect(), connect(autocommit=False), connect()
    share_fallback(admin, "unified")
    scalar(holder, NEXT, ("53",))  # in flight: its record is not visible yet
    done: list[BaseException | None] = []

    def prepare() -> None:
        try:
            admin.execute(PREPARE, ("54",))
            done.append(None)
        except BaseException as error:
            done.append(error)

    thread = threading.Thread(target=prepare)
    thread.start()
    assert eventually(lambda: scalar(observer, "SELECT wait_event FROM pg_stat_activity "
                                               "WHERE pid = %s", (admin.info.backend_pid,))
                      == "PgSleep", 10), "prepare never waited"
    holder.commit()
    thread.join(30)
    assert done == [None]
    assert seq(scalar(admin, NEXT, ("54",))) == 1


def test_a_draw_in_flight_for_longer_than_a_second_makes_prepare_start_after_it(
        connect: Connect) -> None:
    admin, holder = connect(), connect(autocommit=False)
    share_fallback(admin, "unified")
    drawn = scalar(holder, NEXT, ("55",))
    started = time.monotonic()
    admin.execute(PREPARE, ("56",))
    assert 0.9 < time.monotonic() - started < 10
    assert seq(scalar(admin, NEXT, ("56",))) > seq(drawn)
    holder.commit()


def test_maintain_promotes_scopes_that_drew_only_where_asked(db: psycopg.Connection,
                                                             fake_clock: SetClock) -> None:
    fake_clock(db, "2026-11-23 10:00:00+00")
    share_fallback(db, "unified")
    a1, b1, a2 = scalar(db, NEXT, ("57",)), scalar(db, NEXT, ("58",)), scalar(db, NEXT, ("57",))
    assert [seq(a1), seq(b1), seq(a2)] == [1, 2, 3]  # one counter, unique and increasing
    db.execute("SELECT hivenet.maintain()")
    assert scalar(db, "SELECT count(*) FROM hivenet.scope WHERE scope LIKE '%5_'") == 0
    assert db.execute("SELECT scope, serials FROM hivenet.fallback_draw ORDER BY scope"
                      ).fetchall() == [("C0001A0157", 2), ("C0001A0158", 1)]  # summed
    share_fallback(db, "unified", promote=True)
    db.execute("SELECT hivenet.maintain()")
    assert {r[0] for r in db.execute("SELECT scope FROM hivenet.scope WHERE scope LIKE '%5_'")
            } == {"C0001A0157", "C0001A0158"}
    # Each continues after every value the fallback issued in this period: no overlap.
    assert seq(scalar(db, NEXT, ("57",))) == seq(scalar(db, NEXT, ("58",))) == 4
    fake_clock(db, "2026-11-24 10:00:00+00")
    assert scalar(db, NEXT, ("57",)) == "C0001A0157202611240000000001"
    db.execute("SELECT hivenet.maintain()")  # the past day's draws go
    assert scalar(db, "SELECT count(*) FROM hivenet.fallback_draw") == 0


def test_two_promotions_of_one_scope_at_once(connect: Connect) -> None:
    """The second waits for the first's commit, then sees its sequence (not a stale "none")."""
    first, second = connect(autocommit=False), connect(autocommit=False)
    second.execute("SELECT to_regclass('hivenet.\"seq_unified_C0001A0159\"')")  # cache "none"
    first.execute(PREPARE, ("59",))
    done: list[BaseException | None] = []

    def run_second() -> None:
        try:
            second.execute(PREPARE, ("59",))
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
    assert seq(scalar(connect(), NEXT, ("59",))) == 1


def test_first_users_of_the_fallback_never_wait_for_each_other(connect: Connect) -> None:
    admin, holder, other = connect(), connect(autocommit=False), connect()
    share_fallback(admin, "unified")
    first = scalar(holder, NEXT, ("71",))  # open transaction, first use of the scope
    other.execute("SET lock_timeout = '500ms'")
    assert scalar(other, NEXT, ("71",)) > first
    holder.rollback()
    assert scalar(other, NEXT, ("71",)) > first  # and the rolled-back number stays unused


def test_a_session_that_saw_no_sequence_sees_a_promotion_committed_since(connect: Connect
                                                                         ) -> None:
    """The session caches "no such sequence"; without refreshing it, the open transaction
    would go on drawing from the fallback after the scope's own sequence started, and issue
    the same serial as another session."""
    stale, admin, other = connect(), connect(), connect()
    share_fallback(admin, "unified", promote=True)
    first = scalar(other, NEXT, ("72",))  # committed: maintain() will promote the scope
    stale.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
    before = scalar(stale, NEXT, ("72",))  # from the fallback; the session "knows" none
    admin.execute("SELECT hivenet.maintain()")  # promotes the scope and commits
    assert scalar(admin, "SELECT count(*) FROM hivenet.scope WHERE scope = 'C0001A0172'") == 1
    by_other = scalar(other, NEXT, ("72",))  # from the scope's own sequence
    by_stale = scalar(stale, NEXT, ("72",))
    stale.execute("COMMIT")
    assert len({first, before, by_other, by_stale}) == 4, "a serial was issued twice"
    assert by_stale > before


def test_promotion_by_maintain_raced_by_16_connections_issues_no_serial_twice(
        connect: Connect) -> None:
    """16 connections draw from eight scopes of the fallback in transactions of every length
    and both isolation levels while maintain() promotes them: no serial twice, and each
    connection sees every scope's serials increase."""
    conns = [connect() for _ in range(16)]  # transactions by BEGIN, with their level
    admin = connect()
    share_fallback(admin, "unified", promote=True)
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
                instance = f"{80 + rng.randint(0, 7):02d}"
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
    assert scalar(admin, "SELECT count(*) FROM hivenet.scope WHERE scope LIKE 'C0001A018%'") > 0


def test_a_full_fallback_names_what_is_shared(db: psycopg.Connection, fake_clock: SetClock
                                              ) -> None:
    fake_clock(db, "2026-11-23 10:00:00+00")
    db.execute("""SELECT hivenet.define_format('tiny', '[{"field": "branch", "width": 2,
                  "charset": "digit"}, {"time": "YYYYMMDD"}, {"seq": 1, "reset": "day"}]')""")
    share_fallback(db, "tiny")
    for branch in range(9):
        db.execute("SELECT hivenet.next_serial('tiny', jsonb_build_object('branch', %s::text))",
                   (f"{branch:02d}",))
    code, message = failure(db, """SELECT hivenet.next_serial('tiny', '{"branch": "99"}')""")
    assert code == "HN010"
    assert ("shared fallback counter of the unprepared scopes (scope '99' among them" in message
            and "hivenet-db prepare" in message), message


def test_the_fallback_settings_name_formats(db: psycopg.Connection) -> None:
    for name in ("shared_fallback", "promote_fallback_scopes"):
        code, message = failure(db, "UPDATE hivenet.setting SET value = 'unified, nope' "
                                    "WHERE name = %s", (name,))
        assert code == "HN001" and f"setting {name}: 'nope' is no format" in message
        assert scalar(db, "UPDATE hivenet.setting SET value = ' unified,id_service,unified,' "
                          "WHERE name = %s RETURNING value", (name,)) == "id_service,unified"


def test_a_one_scope_format_defined_off_the_single_primary_has_its_scope_parked(
        db: psycopg.Connection) -> None:
    """A format without counter-key fields gets its one scope with the format; on a database
    that may not issue it (instances declared, not the single primary) parked, so that it is
    refused there and counts from 1 once the database becomes the single primary."""
    db.execute("SELECT hivenet.own_instances('01-09', false)")
    db.execute("""SELECT hivenet.define_format('tick', '[{"literal": "T"}, {"time": "YYYYMMDD"},
                  {"seq": 6, "reset": "day"}]')""")
    assert scalar(db, "SELECT sequence_name FROM hivenet.scope WHERE format = 'tick'") == \
        "off_tick_"
    tick = "SELECT hivenet.next_serial('tick', '{}')"
    code, message = failure(db, tick)
    assert code == "HN002" and "single_primary_formats" in message, message
    db.execute("SELECT hivenet.own_instances('01-09', true)")
    assert scalar(db, tick).endswith("000001")
