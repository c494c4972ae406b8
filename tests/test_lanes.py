"""Hash lanes (allocate.sql, revision 0017): the scopes of a laned format (unified and system,
64 lanes; custom formats with "lanes" in their seq segment) share a bounded set of sequences,
a scope drawing from lane hashtext(scope) & (lanes - 1). Nothing is created on a first use,
and every guarantee holds per lane: unique under concurrency, increasing per scope, reset per
period, a clock stepped back, HN010 naming the lane, ownership checked on every call."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.helpers import failure, in_parallel, role_in, scalar

Connect = Callable[..., psycopg.Connection]
SetClock = Callable[[psycopg.Connection, str], None]
STRIDE = 10 ** 14

# Custom laned format of small capacity (99 a day, 2 lanes): exhaustion is quick to reach.
TINY = [{"field": "k", "width": 4, "charset": "alnum"}, {"time": "YYYYMMDD"},
        {"seq": 2, "reset": "day", "lanes": 2}]


def _lane_of(db: psycopg.Connection, scope: str, lanes: int = 64) -> int:
    return int(scalar(db, "SELECT hivenet._lane_of(%s, %s)", (scope, lanes)))


def _scopes_in(db: psycopg.Connection, lane: int, count: int, lanes: int = 64,
               prefix: str = "C") -> list[str]:
    """count systems (5 characters) whose unified scope <system>A0101 falls in lane."""
    found: list[str] = []
    n = 0
    while len(found) < count:
        system = f"{prefix}{n:04d}"
        if _lane_of(db, system + "A0101", lanes) == lane:
            found.append(system)
        n += 1
    return found


def _unified(conn: psycopg.Connection, system: str, instance: str = "01") -> str:
    return str(scalar(conn, "SELECT hivenet.next_unified_serial(%s, 'A01', %s)",
                      (system, instance)))


def _counters(db: psycopg.Connection) -> dict[str, Any]:
    """What a first use could create: scope rows, pending rows, sequences of schema hivenet."""
    return {
        "scopes": scalar(db, "SELECT count(*) FROM hivenet.scope"),
        "pending": scalar(db, "SELECT count(*) FROM hivenet.scope_pending"),
        "sequences": scalar(db, "SELECT count(*) FROM pg_class WHERE relkind = 'S' "
                                "AND relnamespace = 'hivenet'::regnamespace"),
    }


def test_builtin_lanes_and_formats_without(db: psycopg.Connection) -> None:
    lanes: dict[str, int | None] = dict(
        db.execute("SELECT name, lanes FROM hivenet.format").fetchall())
    assert lanes == {"unified": 64, "system": 64, "interface": None, "id_service": None,
                     "merchant_trade": None, "per_second": None}
    assert scalar(db, "SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relname "
                      "~ '^lane_(unified|system)_[0-9]+$'") == 128


def test_a_first_use_creates_nothing_and_a_scope_only_goes_up(db: psycopg.Connection) -> None:
    before = _counters(db)
    first = [_unified(db, "N0001", f"{i:02d}") for i in range(1, 11)]
    again = [_unified(db, "N0001", f"{i:02d}") for i in range(1, 11)]
    assert _counters(db) == before
    assert all(b > a and b[:18] == a[:18] for a, b in zip(first, again, strict=True))
    # prepare_scope creates nothing either (it checks the fields).
    db.execute("SELECT hivenet.prepare_scope('unified', %s)",
               (json.dumps({"system": "N0002", "module": "A01", "instance": "01"}),))
    assert _counters(db) == before
    assert failure(db, "SELECT hivenet.prepare_scope('unified', %s)",
                   ('{"system": "N0002", "module": "A01", "instance": "00"}',))[0] == "HN001"


def test_scopes_of_one_lane_interleave_and_never_repeat(db: psycopg.Connection) -> None:
    a, b = _scopes_in(db, 5, 2)
    serials = [_unified(db, system) for _ in range(3) for system in (a, b)]
    seqs = [int(s[18:]) for s in serials]
    assert seqs == sorted(seqs) and len(set(seqs)) == 6  # one lane: one counter for both
    assert seqs[-1] - seqs[0] == 5


def test_a_rolled_back_first_use_is_a_gap_never_reissued(db: psycopg.Connection,
                                                         connect: Connect) -> None:
    tx = connect(autocommit=False)
    rolled_back = _unified(tx, "R0001")
    tx.rollback()
    assert _unified(db, "R0001") > rolled_back


def test_nobody_waits_for_another_callers_commit_in_a_lane(
        connect: Connect, db: psycopg.Connection, fake_clock: SetClock) -> None:
    """A transaction that moved a lane to a new day (_advance) and stays open blocks no other
    scope of the lane: the reset's lock is held for one setval, never until commit."""
    a, b = _scopes_in(db, 13, 2)
    holder, other = connect(autocommit=False), connect()
    for conn in (holder, other):
        fake_clock(conn, "2031-06-01 09:00+00")
    first = _unified(holder, a)  # the lane's first of the day: _advance, transaction open
    other.execute("SET lock_timeout = '500ms'")
    assert int(_unified(other, b)[18:]) > int(first[18:])
    holder.rollback()


def test_16_connections_in_one_lane_issue_no_serial_twice(connect: Connect,
                                                          db: psycopg.Connection) -> None:
    systems = _scopes_in(db, 9, 4)

    def work(conn: psycopg.Connection, barrier: Any) -> list[str]:
        barrier.wait()
        out = []
        for i in range(50):
            out.append(_unified(conn, systems[i % 4]))
        return out

    results = in_parallel([connect() for _ in range(16)], work)
    serials = [s for r in results for s in r]
    assert len(serials) == len(set(serials)) == 800
    seqs = sorted(int(s[18:]) for s in serials)
    assert len(set(seqs)) == 800  # the lane's numbers: unique across its scopes
    for result in results:  # each connection's serials of a scope increase
        for system in systems:
            mine = [s for s in result if s.startswith(system)]
            assert mine == sorted(mine)


def test_a_new_day_restarts_the_lane_and_a_clock_step_back_stays_in_it(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    (system,) = _scopes_in(db, 11, 1)
    fake_clock(db, "2031-05-06 10:00+00")
    assert _unified(db, system) == f"{system}A010120310506" + "1".zfill(10)
    assert _unified(db, system).endswith("2")
    fake_clock(db, "2031-05-07 00:00:01+00")
    assert _unified(db, system) == f"{system}A010120310507" + "1".zfill(10)
    fake_clock(db, "2031-05-06 23:59:00+00")  # stepped back: the lane's period goes on
    assert _unified(db, system) == f"{system}A010120310507" + "2".zfill(10)


def test_a_custom_laned_format_exhausts_a_lane_with_hn010_naming_it(
        db: psycopg.Connection) -> None:
    db.execute("SELECT hivenet.define_format('tiny', %s)", (json.dumps(TINY),))
    assert scalar(db, "SELECT lanes FROM hivenet.format WHERE name = 'tiny'") == 2
    keys = [k for k in (f"K{n:03d}" for n in range(40)) if _lane_of(db, k, 2) == 1][:3]
    other = next(k for k in (f"K{n:03d}" for n in range(40)) if _lane_of(db, k, 2) == 0)
    issued = [scalar(db, "SELECT hivenet.next_serial('tiny', %s)",
                     (json.dumps({"k": keys[i % 3]}),)) for i in range(99)]
    assert len(set(issued)) == 99
    code, message = failure(db, "SELECT hivenet.next_serial('tiny', %s)",
                            (json.dumps({"k": keys[0]}),))
    assert code == "HN010" and "lane 1" in message and keys[0] in message, message
    # The other lane is not touched.
    assert scalar(db, "SELECT hivenet.next_serial('tiny', %s)",
                  (json.dumps({"k": other}),)).endswith("01")


@pytest.mark.parametrize("lanes, why", [
    (3, "power of two"), (2048, "power of two"), ('"64"', "power of two"),
    (1.5, "power of two"), (-2, "power of two"),
])
def test_bad_lanes_are_refused(db: psycopg.Connection, lanes: Any, why: str) -> None:
    segments = json.dumps(TINY).replace('"lanes": 2', f'"lanes": {lanes}')
    code, message = failure(db, "SELECT hivenet.define_format('bad', %s)", (segments,))
    assert code == "HN001" and why in message, message


def test_lanes_are_refused_for_a_format_that_prints_a_finer_time(db: psycopg.Connection) -> None:
    segments = [{"field": "k", "width": 4}, {"time": "YYYYMMDDHHMISS"},
                {"seq": 4, "reset": "day", "lanes": 8}]
    code, message = failure(db, "SELECT hivenet.define_format('clocked', %s)",
                            (json.dumps(segments),))
    assert code == "HN001" and "lanes" in message and "second" in message, message


def test_lanes_0_is_a_sequence_per_scope(db: psycopg.Connection) -> None:
    db.execute("SELECT hivenet.define_format('plain', %s)",
               (json.dumps(TINY).replace('"lanes": 2', '"lanes": 0'),))
    assert scalar(db, "SELECT lanes FROM hivenet.format WHERE name = 'plain'") is None
    assert "lanes" not in json.dumps(scalar(db, "SELECT segments FROM hivenet.format "
                                                "WHERE name = 'plain'"))


def test_unowned_instances_are_refused_on_every_call_and_lanes_never_go_back(
        db: psycopg.Connection) -> None:
    before = _unified(db, "W0001", "02")
    db.execute("SELECT hivenet.own_instances('01')")  # no force: no scope recorded for lanes
    try:
        assert _unified(db, "W0001", "01")[:10] == "W0001A0101"
        body = str(scalar(db, "SELECT pg_get_functiondef('hivenet._fast_unified'::regproc)"))
        assert "p_c = ANY ('{01}'::text[])" in body, body
        for sql in ("SELECT hivenet.next_unified_serial('W0001', 'A01', '02')",
                    "SELECT hivenet.next_serial('unified', "
                    "'{\"system\": \"W0001\", \"module\": \"A01\", \"instance\": \"02\"}')",
                    "SELECT hivenet.next_system_serial('W0001', 'A01', '02')"):
            code, message = failure(db, sql)
            assert code == "HN002" and "instance '02'" in message, message
        db.execute("SELECT hivenet.own_instances('01-02')")
        assert _unified(db, "W0001", "02") > before  # owned again: its lane went on
    finally:
        db.execute("SELECT hivenet.own_instances('all')")


def test_the_failover_fence_moves_every_lane(db: psycopg.Connection) -> None:
    before = _unified(db, "F0001")
    rows = db.execute("SELECT counter, from_value, to_value FROM hivenet.fence_failover(1000, "
                      "true) WHERE format = 'unified'").fetchall()
    lanes = {r[0] for r in rows}
    assert {f"lane_unified_{i}" for i in range(64)} <= lanes
    assert not any(c.startswith("seq_") for c in lanes)
    after = _unified(db, "F0001")
    assert int(after[18:]) >= int(before[18:]) + 1000


def test_scope_usage_shows_the_lanes(db: psycopg.Connection) -> None:
    (system,) = _scopes_in(db, 7, 1)
    for _ in range(3):
        _unified(db, system)
    rows = db.execute("SELECT scope, issued FROM hivenet.scope_usage "
                      "WHERE format = 'unified'").fetchall()
    assert len(rows) == 64 and ("(lane 7)", 3) in rows
    assert scalar(db, "SELECT count(*) FROM hivenet.scope_usage WHERE format = 'interface' "
                      "AND scope = '(new scopes)'") == 1


def test_the_application_role_allocates_and_cannot_set_a_lane(db: psycopg.Connection) -> None:
    lane = f"hivenet.lane_unified_{_lane_of(db, 'P0001A0101')}"
    with role_in(db, "hivenet_lanes_app", "hivenet_app") as app:
        assert _unified(app, "P0001")[:10] == "P0001A0101"  # first use, through the fast path
        assert scalar(app, "SELECT hivenet.next_serial('unified', "
                           "'{\"system\": \"P0001\", \"module\": \"A01\", \"instance\": \"01\"}')")
        for sql in (f"SELECT setval('{lane}', 1)", f"ALTER SEQUENCE {lane} RESTART"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), app.transaction():
                app.execute(sql)
