"""System-serial step state machine (SPEC §4, §8; issue 4), against real PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from hivenet_db import (
    AsyncStepRepository,
    InvalidInput,
    RequestMismatch,
    SerialOutsideWindow,
    StaleAttempt,
    StepAlreadySucceeded,
    StepInProgress,
    StepRepository,
    StepStart,
)
from hivenet_db._execute import SyncDB
from hivenet_db.propagation import unified_serial_context
from tests.helpers import (
    async_connection,
    functions_run,
    run_sql,
    scalar,
    wait_until_blocked,
)
from tests.test_fast_path import _plpgsql_calls

Connect = Callable[..., psycopg.Connection]
REQUEST = {"from": "6222020000000001", "to": "6222020000000002", "amount": "100.00"}


# --- helpers ---------------------------------------------------------------------------------

def new_serial(db: psycopg.Connection, kind: str = "system") -> str:
    return str(scalar(db, f"SELECT hivenet.next_{kind}_serial('C0001', 'A01', '01')"))


def begin(conn: psycopg.Connection, serial: str | None, request: Any = REQUEST,
          **options: Any) -> Any:
    named = "".join(f", {name} => %({name})s" for name in options)
    return conn.execute(
        f"SELECT * FROM hivenet.begin_step(%(serial)s, %(request)s{named})",
        {"serial": serial, "request": None if request is None else Jsonb(request), **options},
    ).fetchone()


def finish(conn: psycopg.Connection, serial: str, attempt: int | None, succeeded: bool | None,
           response: Any = None) -> None:
    conn.execute("SELECT hivenet.finish_step(%s, %s, %s, %s)",
                 (serial, attempt, succeeded, None if response is None else Jsonb(response)))


def attempts(db: psycopg.Connection, serial: str) -> list[dict[str, Any]]:
    """Every attempt of the step, as stored (the audit)."""
    return [row[0] for row in db.execute(
        "SELECT to_jsonb(a) FROM hivenet.step_attempt a WHERE system_serial = %s "
        "ORDER BY attempt", (serial,))]


@contextmanager
def sqlstate(code: str) -> Iterator[None]:
    with pytest.raises(psycopg.Error) as caught:
        yield
    assert caught.value.sqlstate == code, caught.value


class Background:
    """Run ``fn`` in a thread; ``result()`` returns its value or raises its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,))
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._value = fn()
        except BaseException as error:
            self._error = error

    def result(self) -> Any:
        self._thread.join(20)
        assert not self._thread.is_alive()
        if self._error is not None:
            raise self._error
        return self._value


# --- the table of SPEC §4 --------------------------------------------------------------------

def test_a_new_step_starts_processing(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    assert begin(db, serial) == ("started", 1, None)
    [row] = attempts(db, serial)
    assert row["state"] == "processing" and row["finished_at"] is None
    assert row["started_at"] is not None


def test_a_processing_step_is_in_unknown_state(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    begin(db, serial)
    with sqlstate("HN030"):
        begin(db, serial)
    assert len(attempts(db, serial)) == 1


def test_success_replays_the_original_response_identically(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    original = {"balance": 1.50, "memo": "汇款成功", "parts": [1, {"z": None, "a": True}]}
    _, attempt, _ = begin(db, serial)
    finish(db, serial, attempt, True, original)
    stored = db.execute("SELECT %s::jsonb::text", (Jsonb(original),)).fetchone()[0]
    for _ in range(2):
        outcome, replayed_attempt, response = begin(db, serial)
        assert (outcome, replayed_attempt, response) == ("replayed", 1, original)
        again = db.execute("SELECT response::text FROM hivenet.begin_step(%s, %s)",
                           (serial, Jsonb(REQUEST))).fetchone()[0]
        assert again == stored  # byte for byte, 1.50 stays 1.50
    assert len(attempts(db, serial)) == 1


def test_success_is_rejected_with_the_reject_policy(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    _, attempt, _ = begin(db, serial, on_success="reject")
    finish(db, serial, attempt, True, {"ok": True})
    with sqlstate("HN031"):
        begin(db, serial, on_success="reject")
    assert begin(db, serial, on_success="replay")[0] == "replayed"


def test_failed_proceeds_with_the_next_attempt(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    finish(db, serial, begin(db, serial)[1], False, {"code": "TIMEOUT"})
    assert begin(db, serial) == ("started", 2, None)
    first, second = attempts(db, serial)
    assert (first["state"], first["error"], first["response"]) == (
        "failed", {"code": "TIMEOUT"}, None)
    assert second["state"] == "processing"


@pytest.mark.parametrize("state", ["processing", "success", "failed"])
def test_another_request_under_the_same_serial_is_a_mismatch(db: psycopg.Connection,
                                                              state: str) -> None:
    serial = new_serial(db)
    _, attempt, _ = begin(db, serial)
    if state != "processing":
        finish(db, serial, attempt, state == "success", {"ok": True})
    with sqlstate("HN032"):
        begin(db, serial, {**REQUEST, "amount": "100.01"})
    with sqlstate("HN032"):
        begin(db, serial, None)
    assert len(attempts(db, serial)) == 1


def test_the_fingerprint_is_of_the_normalised_request(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    db.execute("SELECT hivenet.begin_step(%s, '{\"b\": 1,   \"a\": [1, 2]}')", (serial,))
    finish(db, serial, 1, True, {"ok": True})
    assert begin(db, serial, {"a": [1, 2], "b": 1})[0] == "replayed"
    [row] = attempts(db, serial)
    expected = hashlib.sha256(b'{"a": [1, 2], "b": 1}').hexdigest()
    assert row["fingerprint"] == "\\x" + expected


def test_no_request_is_a_request_too(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    finish(db, serial, begin(db, serial, None)[1], True, {"ok": 1})
    assert begin(db, serial, None)[0] == "replayed"
    with sqlstate("HN032"):
        begin(db, serial, {})


# --- the replay's fast path (issue 13) -------------------------------------------------------

def succeeded(db: psycopg.Connection, unified: str | None = None) -> str:
    """A step that succeeded, begun with unified serial ``unified``."""
    serial = new_serial(db)
    finish(db, serial, begin(db, serial, unified_serial=unified)[1], True, {"paid": 1})
    return serial


def test_a_replay_is_inlined_and_runs_no_plpgsql(db: psycopg.Connection) -> None:
    """The guard of the replay's speed (not timed): begin_step is inlined into the caller's
    prepared statement, the replay is the first branch (a primary-key read of _step_replay) and
    runs no PL/pgSQL function; a new step runs the fast path _start_key alone (no full path,
    no _begin_attempt, no _start_attempt), its finish finish_request alone. Fails
    when begin_step is PL/pgSQL,
    SECURITY DEFINER or has SET, when its body stops being inlinable, or when a layer comes
    back."""
    unified = new_serial(db, "unified")
    serial = succeeded(db, unified)
    db.execute("PREPARE replay(text, jsonb, text) AS "
               "SELECT * FROM hivenet.begin_step($1, $2, 'replay', $3)")
    db.execute("SET plan_cache_mode = force_generic_plan")
    args = sql.SQL("({}, {}, {})").format(sql.Literal(serial), sql.Literal(Jsonb(REQUEST)),
                                          sql.Literal(unified))
    plan = [row[0] for row in db.execute(
        sql.SQL("EXPLAIN (VERBOSE) EXECUTE replay") + args)]
    text = "\n".join(plan)
    assert "hivenet.begin_step" not in text and "_step_in_window" not in text, text
    assert plan[0].startswith("Limit") and "Append" in plan[2], text
    scans = [line.strip() for line in plan  # but the count of a replay (decisions.sql)
             if "Scan" in line and "decision_counter" not in line]
    assert scans[0].startswith("->  Index Scan using request_attempt_pkey"), text
    assert "One-Time Filter: hivenet._start_key(true, " in text, text  # the new step's branch
    assert scans[1].startswith("->  Function Scan on hivenet._begin_key"), text
    execute = (sql.SQL("EXECUTE replay") + args).as_string(db)
    assert _plpgsql_calls(db, execute) == {}
    assert db.execute(execute).fetchone() == ("replayed", 1, {"paid": 1})
    fresh = new_serial(db)
    assert _plpgsql_calls(db, f"SELECT * FROM hivenet.begin_step('{fresh}', NULL)",
                          times=1) == {"_start_key": 1, "_count_decision": 1}
    # One PL/pgSQL layer: finish_step is inlined into its call of finish_request.
    assert _plpgsql_calls(db, f"SELECT hivenet.finish_step('{fresh}', 1, true)",
                          times=1) == {"finish_request": 1}


@pytest.mark.parametrize(("options", "code"), [
    ({"on_success": "reject"}, "HN031"),
    ({"on_success": None}, "HN001"),
    ({"lease": timedelta(0)}, "HN001"),
    ({"nowait": None}, "HN001"),
    ({"unified_serial": "C0001A010120261121000000000001"}, "HN001"),  # a system serial
    ({"request": {"amount": "1"}}, "HN032"),
])
def test_a_succeeded_step_still_gets_every_error_of_its_arguments(
        db: psycopg.Connection, options: dict[str, Any], code: str) -> None:
    """What the replay's fast path does not vouch for goes to the full path and its error."""
    serial = succeeded(db)
    request = options.pop("request", REQUEST)
    with sqlstate(code):
        begin(db, serial, request, **options)
    assert begin(db, serial) == ("replayed", 1, {"paid": 1})


def test_a_replay_with_other_options_or_unified_serial_is_still_a_replay(
        db: psycopg.Connection) -> None:
    unified, other = new_serial(db, "unified"), new_serial(db, "unified")
    serial = succeeded(db, unified)
    for options in ({}, {"unified_serial": unified}, {"unified_serial": other},
                    {"nowait": True}, {"lease": timedelta(minutes=1)}):
        assert begin(db, serial, **options) == ("replayed", 1, {"paid": 1}), options
    [row] = attempts(db, serial)
    assert row["unified_serial"] == unified  # a replay records nothing


def test_a_succeeded_step_leaving_the_window_is_refused_not_replayed(
        db: psycopg.Connection, fake_clock: Callable[..., None]) -> None:
    """HN021 as for a new step, also while the step's record is still there (maintain() not
    run yet), and also with the window changed by a setting (the fast path is rewritten)."""
    fake_clock(db, "2026-10-01 12:00:00+00")
    serial = dated("20261001")  # made elsewhere: no serial of its scope was issued here
    finish(db, serial, begin(db, serial)[1], True, {"paid": 1})
    # Day 2026-10-01 starts 30 days before the earliest callers' clock (UTC-12) reads 10-31.
    fake_clock(db, "2026-10-31 12:00:00+00")
    assert begin(db, serial)[0] == "replayed"
    fake_clock(db, "2026-10-31 12:00:01+00")
    with sqlstate("HN021"):
        begin(db, serial)
    with db.transaction(force_rollback=True):
        db.execute("UPDATE hivenet.setting SET value = '40 days' WHERE name = 'step_retention'")
        assert begin(db, serial)[0] == "replayed"
    # The clock stepped back beyond the latest callers' clock (UTC+14) and the tolerance.
    fake_clock(db, "2026-09-30 09:54:59+00")
    with sqlstate("HN021"):
        begin(db, serial)
    assert len(attempts(db, serial)) == 1


def test_a_succeeded_step_of_an_instance_owned_elsewhere_is_refused(
        db: psycopg.Connection) -> None:
    serial = succeeded(db)  # instance 01
    with db.transaction(force_rollback=True):
        db.execute("SELECT hivenet.own_instances('02-09', NULL, true)")
        with sqlstate("HN002"):
            begin(db, serial)
    assert begin(db, serial)[0] == "replayed"


@pytest.mark.parametrize("bad", [
    "C0001A0101201507100123456789",      # a unified serial (28)
    "C0001A01012026023000000000001",     # 29 characters
    "C0001A010120260230000000000001",    # 30 February
    "C0001A010020261121000000000001",    # instance 00
    "C0001A010120261121000000000000",    # seq 0
    "C000-A010120261121000000000001",    # not alphanumeric
    "C0001A01\uff10120261121000000000001",  # full-width digit zero
    None,
])
def test_a_bad_system_serial_is_invalid_input(db: psycopg.Connection, bad: str | None) -> None:
    with sqlstate("HN001"):
        begin(db, bad)


@pytest.mark.parametrize("options", [
    {"on_success": "retry"}, {"on_success": None}, {"lease": timedelta(0)},
    {"lease": timedelta(seconds=-1)}, {"nowait": None},
    {"unified_serial": "C0001A010120261121000000000001"},  # a system serial
])
def test_bad_options_are_invalid_input(db: psycopg.Connection, options: dict[str, Any]) -> None:
    serial = new_serial(db)
    with sqlstate("HN001"):
        begin(db, serial, **options)
    assert attempts(db, serial) == []


def test_begin_step_accepts_exactly_the_serials_parse_serial_accepts(
        db: psycopg.Connection) -> None:
    """begin_step recognises the common serials by a regex of its own, and asks parse_serial
    about the rest: over many near-valid serials its verdict must be parse_serial's."""
    db.execute("""
        CREATE FUNCTION pg_temp.parses(p text, f text) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN PERFORM hivenet.parse_serial(p, f); RETURN true;
        EXCEPTION WHEN sqlstate 'HN001' THEN RETURN false; END $$;
        CREATE FUNCTION pg_temp.begins(s text, u text) RETURNS boolean LANGUAGE plpgsql AS $$
        BEGIN PERFORM hivenet.begin_step(s, NULL, 'replay', u); RETURN true;
        EXCEPTION WHEN sqlstate 'HN001' THEN RETURN false;
                  WHEN sqlstate 'HN021' THEN RETURN true;  -- valid, dated outside the window
        END $$""")
    rng = random.Random(4)
    alphabet = "0123456789" * 4 + "AZaz-_ \uff10\u00e9" + "0" * 10
    dates = ["20240229", "20230229", "21000229", "20000229", "20261131", "20261231", "00000101",
             "09991231", "10000101", "99991231", "20261301", "20260001", "20260100", "20260431",
             "20260228", "20260430", "20260931", "20261031"]

    def mutant(width: int) -> str:
        seq = 0 if rng.random() < 0.05 else rng.randrange(1, 10**width)
        chars = list("C0001A0101" + rng.choice(dates) + f"{seq:0{width}d}")
        for _ in range(rng.choice([0, 0, 0, 1, 1, 2, 3])):
            chars[rng.randrange(len(chars))] = rng.choice(alphabet)
        serial = "".join(chars)
        if rng.random() < 0.05:
            serial = serial[:-1] if rng.random() < 0.5 else serial + "1"
        return serial

    # Distinct system serials: each is begun once, so none is rejected as in progress.
    pairs = list({mutant(12): mutant(10) if rng.random() < 0.7 else None
                  for _ in range(4000)}.items())
    disagree, accepted = db.execute("""
        SELECT count(*) FILTER (WHERE begun IS DISTINCT FROM ok), count(*) FILTER (WHERE ok)
        FROM (SELECT pg_temp.begins(s, u) AS begun,
                     pg_temp.parses(s, 'system')
                     AND (u IS NULL OR pg_temp.parses(u, 'unified')) AS ok
              FROM unnest(%s::text[], %s::text[]) AS c(s, u)) t""",
        ([p[0] for p in pairs], [p[1] for p in pairs])).fetchall()[0]
    assert disagree == 0
    assert 500 < accepted < len(pairs) - 500  # the sample has both kinds in number


# --- old serials are refused, not run again (issue 12 part 2) -------------------------------

def dated(day: str) -> str:
    """A system serial made elsewhere (system F0001: this database issues none of its scope)."""
    return f"F0001A0101{day}{random.randrange(1, 10**12):012d}"


@pytest.mark.parametrize(("now", "day", "accepted"), [
    # A serial's date is its caller's, in any zone from UTC-12 to UTC+14. step_retention 30
    # days: at 12:00 UTC the earliest callers' clock reads 00:00, the cutoff 2026-10-22 00:00.
    ("2026-11-21 12:00:00+00", "20261022", True),
    ("2026-11-21 12:00:00+00", "20261021", False),
    ("2026-11-21 12:00:01+00", "20261022", False),
    ("2026-11-21 11:59:59+00", "20261022", True),
    # step_future_tolerance 5 minutes: the latest callers' clock (UTC+14) reads tomorrow
    # 23:55 at 09:55 UTC
    ("2026-11-21 09:55:00+00", "20261122", True),
    ("2026-11-21 09:54:59+00", "20261122", False),
    ("2026-11-21 09:55:00+00", "20261123", False),
    ("2026-11-21 12:00:00+00", "20261122", True),   # a caller at UTC+14 after its midnight
])
def test_a_serial_dated_outside_the_kept_window_is_refused(
        db: psycopg.Connection, fake_clock: Callable[..., None], now: str, day: str,
        accepted: bool) -> None:
    fake_clock(db, now)
    serial = dated(day)
    if accepted:
        assert begin(db, serial)[0] == "started"
        return
    with pytest.raises(psycopg.Error) as caught:
        begin(db, serial)
    assert caught.value.sqlstate == "HN021"
    assert f"system serial {serial} is dated {day[:4]}-{day[4:6]}-{day[6:]}, outside the " \
           "window of steps from " in str(caught.value)
    assert attempts(db, serial) == []


def test_the_window_message_names_its_days_and_settings(
        db: psycopg.Connection, fake_clock: Callable[..., None]) -> None:
    fake_clock(db, "2026-11-21 12:00:00+00")
    with pytest.raises(psycopg.Error) as caught:
        begin(db, dated("20261001"))
    message = str(caught.value).splitlines()[0]
    assert message.endswith("is dated 2026-10-01, outside the window of steps from 2026-10-22 "
                            "to 2026-11-22 (its caller's local date, in any zone from UTC-12 to "
                            "UTC+14): a step dated earlier may already be purged "
                            "(step_retention 30 days), one dated later is beyond the clock "
                            "tolerance (step_future_tolerance 5 minutes)")


def test_a_purged_step_is_refused_not_run_again(
        db: psycopg.Connection, fake_clock: Callable[..., None]) -> None:
    """The money-moving step of issue 12: finished, purged after step_retention, then its serial
    comes back. It must not start afresh."""
    fake_clock(db, "2026-10-01 12:00:00+00")
    serial = new_serial(db)
    finish(db, serial, begin(db, serial)[1], True, {"paid": 1})
    fake_clock(db, "2026-11-01 12:00:01+00")
    db.execute("SELECT hivenet.maintain()")
    assert attempts(db, serial) == []
    with sqlstate("HN021"):
        begin(db, serial)


def test_a_step_dated_ahead_is_not_purged_while_it_may_run_again(
        db: psycopg.Connection, fake_clock: Callable[..., None]) -> None:
    """Issue 29 point 1: a serial dated D+1, begun and finished at D 23:57, with step_retention
    2 days. Purged by its finish time at D+2 23:58, it started again; kept until begin_step
    refuses its date, it is replayed."""
    db.execute("UPDATE hivenet.setting SET value = '2 days' WHERE name = 'step_retention'")
    fake_clock(db, "2026-11-20 23:57:00+00")
    serial = dated("20261121")
    finish(db, serial, begin(db, serial)[1], True, {"paid": 1})
    fake_clock(db, "2026-11-22 23:58:00+00")
    db.execute("SELECT hivenet.maintain()")
    assert begin(db, serial) == ("replayed", 1, {"paid": 1})


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


# The edges of the window a step's serial may be dated in, for both tolerances: begun at the
# first instant its date is accepted (dated ahead: UTC+14 and step_future_tolerance) and at the
# last (dated behind: UTC-12 and step_retention).
@pytest.mark.parametrize("tolerance", ["5 minutes", "1 day"])
@pytest.mark.parametrize("retention", ["2 days", "30 days"])
@pytest.mark.parametrize("edge", ["ahead", "behind"])
def test_purged_steps_are_refused_at_every_edge_of_the_window(
        db: psycopg.Connection, fake_clock: Callable[..., None], edge: str, retention: str,
        tolerance: str) -> None:
    """At every instant from the step's begin until well after its purge: after maintain(),
    begin_step replays the step or refuses its serial (HN021), never starts it again; the
    record is purged exactly when it is refused and its last attempt ended step_retention ago;
    and it is purged in the end."""
    db.execute("UPDATE hivenet.setting SET value = %s WHERE name = 'step_retention'",
               (retention,))
    db.execute("UPDATE hivenet.setting SET value = %s WHERE name = 'step_future_tolerance'",
               (tolerance,))
    day = _instant("2026-11-21T00:00:00+00:00")
    keep, ahead = (timedelta(days=int(v.split()[0])) if "day" in v else timedelta(minutes=5)
                   for v in (retention, tolerance))
    # The day's start read by the latest caller (UTC+14) plus the tolerance; by the earliest
    # caller (UTC-12) minus the retention.
    first_accepted = day - timedelta(hours=14) - ahead
    last_accepted = day + timedelta(hours=12) + keep
    begun = first_accepted if edge == "ahead" else last_accepted
    serial = dated("20261121")
    second = timedelta(seconds=1)
    fake_clock(db, (begun - second if edge == "ahead" else begun + second).isoformat())
    with sqlstate("HN021"):  # a second outside the window
        begin(db, serial)
    fake_clock(db, begun.isoformat())
    finish(db, serial, begin(db, serial)[1], True, {"paid": 1})
    finished_kept = begun + keep  # the last instant the finish time keeps the record
    edges = [last_accepted, finished_kept]
    instants = sorted({begun + timedelta(hours=h) for h in range(0, int(
        (max(edges) - begun) / timedelta(hours=1)) + 26, 5)}
        | {e + d for e in edges for d in (-second, timedelta(0), second)})
    purged_at = None
    for instant in instants:
        if instant < begun:
            continue
        fake_clock(db, instant.isoformat())
        db.execute("SELECT hivenet.maintain()")
        kept = bool(attempts(db, serial))
        refused = instant > last_accepted
        assert kept == (not refused or instant <= finished_kept), instant
        if refused:
            with sqlstate("HN021"):
                begin(db, serial)
        else:
            assert begin(db, serial) == ("replayed", 1, {"paid": 1}), instant
        if not kept and purged_at is None:
            purged_at = instant
    assert purged_at == min(i for i in instants if i > max(edges))


def test_the_repository_raises_serial_outside_window(
        db: psycopg.Connection, fake_clock: Callable[..., None]) -> None:
    fake_clock(db, "2026-11-21 12:00:00+00")
    with pytest.raises(SerialOutsideWindow, match="outside the window of steps"):
        StepRepository(db).begin(dated("20250101"), REQUEST)


# --- fencing ---------------------------------------------------------------------------------

def test_finishing_another_attempt_is_stale_and_changes_nothing(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    begin(db, serial)
    before = attempts(db, serial)
    for attempt in (2, 0, None):
        with sqlstate("HN033"):
            finish(db, serial, attempt, True, {"ok": True})
    assert attempts(db, serial) == before


def test_finishing_twice_is_stale_and_keeps_the_first_outcome(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    finish(db, serial, begin(db, serial)[1], True, {"first": True})
    before = attempts(db, serial)
    for succeeded in (True, False):
        with sqlstate("HN033"):
            finish(db, serial, 1, succeeded, {"second": True})
    assert attempts(db, serial) == before


def test_a_superseded_attempt_cannot_overwrite_the_retry(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    finish(db, serial, begin(db, serial)[1], False, {"code": "TIMEOUT"})
    begin(db, serial)
    with sqlstate("HN033"):
        finish(db, serial, 1, True, {"late": True})
    assert [a["state"] for a in attempts(db, serial)] == ["failed", "processing"]


def test_finishing_an_unknown_step_is_stale(db: psycopg.Connection) -> None:
    with sqlstate("HN033"):
        finish(db, new_serial(db), 1, True)


def test_succeeded_must_be_given(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    begin(db, serial)
    with sqlstate("HN001"):
        finish(db, serial, 1, None)


# --- begin and finish in one transaction: a concurrent duplicate waits -----------------------

@pytest.mark.parametrize(("first_ends", "policy", "expected"), [
    ("success", "replay", ("replayed", 1, {"paid": True})),
    ("success", "reject", "HN031"),
    ("failed", "replay", ("started", 2, None)),
    ("rollback", "replay", ("started", 1, None)),
])
def test_a_concurrent_duplicate_waits_then_sees_the_outcome(
        connect: Connect, first_ends: str, policy: str, expected: Any) -> None:
    first, second, observer = connect(autocommit=False), connect(), connect()
    serial = new_serial(observer)
    assert begin(first, serial) == ("started", 1, None)
    waiter = Background(lambda: begin(second, serial, on_success=policy))
    wait_until_blocked(observer, second.info.backend_pid)
    if first_ends == "rollback":
        first.rollback()
    else:
        finish(first, serial, 1, first_ends == "success",
               {"paid": True} if first_ends == "success" else {"code": "E"})
        first.commit()
    if isinstance(expected, str):
        with sqlstate(expected):
            waiter.result()
    else:
        assert waiter.result() == expected


def test_nowait_fails_at_once_and_leaves_lock_timeout_alone(connect: Connect) -> None:
    first, second = connect(autocommit=False), connect()
    second.execute("SET statement_timeout = '10s'")  # a wait would end as 57014, not HN030
    serial = new_serial(second)
    begin(first, serial)
    with sqlstate("HN030"):
        begin(second, serial, nowait=True)
    assert second.execute("SHOW lock_timeout").fetchone()[0] == "0"
    first.rollback()
    assert begin(second, serial, nowait=True) == ("started", 1, None)
    with sqlstate("HN030"):  # committed processing: the unknown state, nowait or not
        begin(second, serial, nowait=True)


def test_a_waiting_duplicate_in_repeatable_read_gets_a_serialization_failure(
        connect: Connect) -> None:
    first, second, observer = connect(autocommit=False), connect(autocommit=False), connect()
    serial = new_serial(observer)
    begin(first, serial)
    second.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    waiter = Background(lambda: begin(second, serial))
    wait_until_blocked(observer, second.info.backend_pid)
    finish(first, serial, 1, True, {"ok": True})
    first.commit()
    with sqlstate("40001"):  # documented: retry the transaction, which then replays
        waiter.result()
    second.rollback()
    assert begin(second, serial)[0] == "replayed"


def test_finishing_is_a_hot_update(connect: Connect) -> None:
    conn = connect(autocommit=False)
    serial = new_serial(conn)
    finish(conn, serial, begin(conn, serial)[1], True, {"ok": True})
    hot = conn.execute("SELECT pg_stat_get_xact_tuples_hot_updated("
                       "'hivenet.request_attempt'::regclass)").fetchone()[0]
    assert hot == 1


def test_exactly_once_under_16_parallel_duplicates(connect: Connect) -> None:
    """16 connections start the same step together; only `started` applies the effect.

    Per trial, the first starter rolls back once (a crash before commit), so a waiter must take
    over; policies and nowait are mixed. The effect must be applied exactly once per trial.
    """
    clients, trials = 16, 25
    setup = connect()
    setup.execute("CREATE TABLE effect (serial text PRIMARY KEY, applied int NOT NULL)")
    conns = [connect(autocommit=False) for _ in range(clients)]
    barrier = threading.Barrier(clients)
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()
    serials = [new_serial(setup) for _ in range(trials)]
    crashed = [False] * trials

    def client(i: int) -> None:
        conn = conns[i]
        policy = "reject" if i % 2 else "replay"
        nowait = i % 4 == 3
        for trial, serial in enumerate(serials):
            barrier.wait()
            try:
                outcome, attempt, _ = begin(conn, serial, on_success=policy, nowait=nowait)
                if outcome == "started":
                    conn.execute("INSERT INTO effect VALUES (%s, 1) ON CONFLICT (serial) "
                                 "DO UPDATE SET applied = effect.applied + 1", (serial,))
                    with lock:
                        crash = not crashed[trial]
                        crashed[trial] = True
                    if crash:
                        conn.rollback()
                        outcome = "crashed"
                    else:
                        finish(conn, serial, attempt, True, {"trial": trial})
                        conn.commit()
                else:
                    conn.rollback()
            except psycopg.Error as error:
                conn.rollback()
                outcome = error.sqlstate or "?"
            with lock:
                outcomes[outcome] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    applied: dict[str, int] = dict(setup.execute("SELECT serial, applied FROM effect").fetchall())
    assert applied == {serial: 1 for serial in serials}
    assert outcomes["started"] == trials and outcomes["crashed"] == trials
    assert set(outcomes) <= {"started", "crashed", "replayed", "HN030", "HN031"}
    assert sum(outcomes.values()) == clients * trials
    states = setup.execute("SELECT state, steps FROM hivenet.step_states").fetchall()
    assert states == [("processing", 0), ("success", trials), ("failed", 0), ("expired", 0)]


# --- across transactions: leases, stuck steps, operator resolution ---------------------------

def stuck(db: psycopg.Connection) -> list[tuple[str, int]]:
    return db.execute("SELECT system_serial, attempt FROM hivenet.stuck_steps").fetchall()


def test_a_step_past_its_lease_is_stuck_until_resolved(db: psycopg.Connection,
                                                       fake_clock: Callable[..., None]) -> None:
    fake_clock(db, "2026-11-21 10:00:00+00")
    serial = new_serial(db)
    begin(db, serial, lease=timedelta(minutes=1))
    fake_clock(db, "2026-11-21 10:00:59+00")
    assert stuck(db) == []
    fake_clock(db, "2026-11-21 10:01:01+00")
    assert stuck(db) == [(serial, 1)]
    expired = db.execute("SELECT lease_expired_at = '2026-11-21 10:01:00+00' "
                         "FROM hivenet.stuck_steps").fetchone()[0]
    assert expired
    with sqlstate("HN030"):  # past the lease the outcome is still unknown: never re-executed
        begin(db, serial)
    db.execute("SELECT hivenet.resolve_step(%s, 1, true, 'confirmed by the bank''s statement', "
               "'{\"paid\": true}')", (serial,))
    assert stuck(db) == []
    assert begin(db, serial) == ("replayed", 1, {"paid": True})
    [row] = attempts(db, serial)
    assert row["note"] == "confirmed by the bank's statement"
    assert row["resolved_by"] == db.info.user
    with sqlstate("HN033"):  # the original attempt answers late: fenced off
        finish(db, serial, 1, False, {"code": "LATE"})


def test_the_default_lease_is_the_setting(db: psycopg.Connection,
                                          fake_clock: Callable[..., None]) -> None:
    fake_clock(db, "2026-11-21 10:00:00+00")
    serial = new_serial(db)
    begin(db, serial)
    fake_clock(db, "2026-11-21 10:04:59+00")
    assert stuck(db) == []
    fake_clock(db, "2026-11-21 10:05:01+00")
    assert stuck(db) == [(serial, 1)]
    db.execute("UPDATE hivenet.setting SET value = '10 minutes' WHERE name = 'step_lease'")
    assert stuck(db) == []


def test_resolving_as_failed_lets_the_step_proceed(db: psycopg.Connection) -> None:
    serial = new_serial(db)
    begin(db, serial)
    db.execute("SELECT hivenet.resolve_step(%s, 1, false, 'remote has no such transfer')",
               (serial,))
    assert begin(db, serial) == ("started", 2, None)
    with sqlstate("HN033"):  # resolving what is not processing
        db.execute("SELECT hivenet.resolve_step(%s, 1, true, 'again')", (serial,))
    with sqlstate("HN001"):
        db.execute("SELECT hivenet.resolve_step(%s, 2, true, '  ')", (serial,))


# --- audit, reporting, retention -------------------------------------------------------------

def test_every_attempt_is_kept(db: psycopg.Connection) -> None:
    serial, unified = new_serial(db), new_serial(db, "unified")
    for n, succeeded in enumerate((False, False, True), start=1):
        assert begin(db, serial, unified_serial=unified) == ("started", n, None)
        finish(db, serial, n, succeeded, {"n": n})
    rows = attempts(db, serial)
    assert [(r["attempt"], r["state"], r["error"], r["response"]) for r in rows] == [
        (1, "failed", {"n": 1}, None), (2, "failed", {"n": 2}, None),
        (3, "success", None, {"n": 3})]
    assert all(r["unified_serial"] == unified and r["finished_at"] >= r["started_at"]
               for r in rows)


def test_step_states_counts_steps_by_their_latest_attempt(db: psycopg.Connection) -> None:
    states = "SELECT state, steps FROM hivenet.step_states"
    assert db.execute(states).fetchall() == [("processing", 0), ("success", 0), ("failed", 0),
                                             ("expired", 0)]
    a, b, c = new_serial(db), new_serial(db), new_serial(db)
    begin(db, a)
    finish(db, b, begin(db, b)[1], False)
    finish(db, b, begin(db, b)[1], True)
    finish(db, c, begin(db, c)[1], False)
    assert db.execute(states).fetchall() == [("processing", 1), ("success", 1), ("failed", 1),
                                             ("expired", 0)]


def test_maintain_purges_finished_steps_past_retention(db: psycopg.Connection,
                                                       fake_clock: Callable[..., None]) -> None:
    fake_clock(db, "2026-10-01 12:00:00+00")
    old, retried, processing = new_serial(db), new_serial(db), new_serial(db)
    finish(db, old, begin(db, old)[1], True)
    finish(db, retried, begin(db, retried)[1], False)
    begin(db, processing)
    # The retry within step_retention of the serial's date (later ones are refused: HN021).
    fake_clock(db, "2026-10-25 12:00:00+00")
    finish(db, retried, begin(db, retried)[1], True)
    fake_clock(db, "2026-11-21 12:00:00+00")  # retention 30 days: cutoff 2026-10-22
    db.execute("SELECT hivenet.maintain()")
    assert attempts(db, old) == []
    assert [a["state"] for a in attempts(db, retried)] == ["failed", "success"]
    assert len(attempts(db, processing)) == 1


# --- the standard's example 2: failure, retry with the same system serial --------------------

def example_2(db: psycopg.Connection) -> tuple[str, str, list[str]]:
    """Internal-account posting S2 of transaction U fails, is called again with the same S2, a
    new interface serial and the same U, and succeeds; the effect happens once."""
    unified, s2 = new_serial(db, "unified"), new_serial(db)
    claim = db.execute("SELECT to_regproc('hivenet.claim_interface_serial')").fetchone()[0]
    interface_serials = []
    for call, ok in enumerate((False, True), start=1):
        interface = db.execute("SELECT hivenet.next_interface_serial('C0001', 'A01', '01', "
                               "'B0002')").fetchone()[0]
        interface_serials.append(interface)
        if claim is not None:
            db.execute("SELECT hivenet.claim_interface_serial(%s, %s, %s)",
                       (interface, unified, s2))
        assert begin(db, s2, unified_serial=unified) == ("started", call, None)
        finish(db, s2, call, ok, {"posted": ok, "call": call})
    assert begin(db, s2, unified_serial=unified) == ("replayed", 2, {"posted": True, "call": 2})
    return unified, s2, interface_serials


def test_example_2_retry_after_failure(db: psycopg.Connection) -> None:
    _, s2, _ = example_2(db)
    assert [a["state"] for a in attempts(db, s2)] == ["failed", "success"]


def test_example_2_call_chain_shows_both_calls(db: psycopg.Connection) -> None:
    if db.execute("SELECT to_regproc('hivenet.call_chain')").fetchone()[0] is None:
        pytest.skip("hivenet.call_chain is not in this schema yet (dedup issue)")
    unified, s2, interface_serials = example_2(db)
    chain = [row[0] for row in db.execute("SELECT to_jsonb(c) FROM hivenet.call_chain(%s) c",
                                          (unified,))]
    assert [[v for v in r.values() if v in interface_serials] for r in chain] == [
        [interface_serials[0]], [interface_serials[1]]]
    assert all(s2 in r.values() for r in chain)


# --- Python -----------------------------------------------------------------------------------

def test_repository_begin_finish_and_errors(any_conn: SyncDB, db: psycopg.Connection) -> None:
    serial, conn = new_serial(db), any_conn
    steps = StepRepository(conn)
    start = steps.begin(serial, REQUEST, lease=timedelta(minutes=2))
    assert start == StepStart("started", 1, None) and start.started
    with pytest.raises(StepInProgress):
        steps.begin(serial, REQUEST)
    conn.rollback()
    start = steps.begin(serial, REQUEST)
    steps.finish(serial, start.attempt, True, {"ok": True})
    with pytest.raises(StaleAttempt):
        steps.finish(serial, start.attempt, True)
    conn.rollback()
    steps.finish(serial, steps.begin(serial, REQUEST).attempt, True, {"ok": True})
    assert steps.begin(serial, REQUEST) == StepStart("replayed", 1, {"ok": True})
    conn.commit()
    cases: list[tuple[type[Exception], Callable[[], object]]] = [
        (StepAlreadySucceeded, lambda: steps.begin(serial, REQUEST, on_success="reject")),
        (RequestMismatch, lambda: steps.begin(serial, {"other": 1})),
        (InvalidInput, lambda: steps.begin("C0001", REQUEST)),
    ]
    for error, call in cases:
        with pytest.raises(error):
            call()
        conn.rollback()


def test_a_new_step_starts_by_the_fast_path_of_every_key(db: psycopg.Connection) -> None:
    """begin_step's second branch: a new step with plain options is one INSERT by the fast
    path of every key (_start_key, its checks inlined, its INSERT into _new_attempt);
    nowait, or a step that has an attempt (here a failed one), goes on to the full path
    _begin_key. A retry whose input the fast path vouched for goes straight to the state
    machine: no serial is parsed again, and the fast path is tried once."""
    steps, serial = StepRepository(db), new_serial(db)
    assert functions_run(db, lambda: steps.begin(serial, REQUEST)) == {
        "_start_key": 1, "_count_decision": 1}
    steps.finish(serial, 1, False)
    retry: list[StepStart] = []
    assert functions_run(db, lambda: retry.append(steps.begin(serial, REQUEST))) == {
        "_start_key": 1, "_start_attempt": 2, "_begin_key": 1, "_begin_attempt": 1,
        "_count_decision": 1}
    assert retry == [StepStart("started", 2)]
    fresh = new_serial(db)
    assert functions_run(db, lambda: steps.begin(fresh, REQUEST, nowait=True)) == {
        "_start_key": 1, "_begin_key": 1, "_check_step": 1,  # every check: not plain
        "parse_serial": 1, "_begin_attempt_within": 1, "_begin_attempt": 1,
        "_start_attempt": 1, "_count_decision": 1}


def test_a_step_that_has_an_attempt_still_gets_every_check(
        db: psycopg.Connection, fake_clock: Callable[..., None]) -> None:
    """After the fast path wrote nothing, _begin_key skips the full checks only for input
    the fast path vouches for: a retry of a failed step with a bad unified serial,
    lease or option, or one that left the window, still raises exactly, writing nothing."""
    fake_clock(db, "2026-10-01 12:00:00+00")
    serial = new_serial(db)
    begin(db, serial)
    finish(db, serial, 1, False)
    bad: list[dict[str, Any]] = [{"unified_serial": "C0001A0101" + "9" * 18},
                                 {"lease": timedelta(0)}, {"on_success": "again"}]
    for options in bad:
        with sqlstate("HN001"), db.transaction():
            begin(db, serial, **options)
    fake_clock(db, "2026-10-31 12:00:01+00")  # day 2026-10-01 left the window (UTC-12)
    with sqlstate("HN021"):
        begin(db, serial)
    assert [a["attempt"] for a in attempts(db, serial)] == [1]


def test_a_volatile_serial_is_checked_as_it_is_stored(db: psycopg.Connection) -> None:
    """begin_step given a volatile expression as its serial evaluates it once: the serial
    checked is the serial stored. Here its first evaluation is a valid serial, any later one
    is not."""
    serial = new_serial(db)
    db.execute("CREATE TEMP SEQUENCE evaluations")
    started = db.execute(
        "SELECT * FROM hivenet.begin_step(CASE WHEN nextval('evaluations') = 1 "
        "THEN %s ELSE 'not a serial' END)", (serial,)).fetchall()
    assert started == [("started", 1, None)]
    assert scalar(db, "SELECT currval('evaluations')") == 1
    assert [a["attempt"] for a in attempts(db, serial)] == [1]


def test_context_manager_three_lines(any_conn: SyncDB, db: psycopg.Connection) -> None:
    serial, effects = new_serial(db), list[int]()
    for _ in range(2):
        with StepRepository(any_conn).step(serial, REQUEST) as step:
            if step.started:
                step.response = {"paid": len(effects) + 1}
                effects.append(1)
        any_conn.commit()
        assert step.response == {"paid": 1}
    assert effects == [1] and step.replayed
    assert [a["state"] for a in attempts(db, serial)] == ["success"]


def test_context_manager_records_failure_and_reraises(any_conn: SyncDB,
                                                      db: psycopg.Connection) -> None:
    serial = new_serial(db)
    with pytest.raises(ZeroDivisionError), StepRepository(any_conn).step(serial, REQUEST):
        _ = 1 / 0
    any_conn.commit()  # the caller keeps the failure (e.g. to answer "failed, retry")
    [row] = attempts(db, serial)
    assert row["state"] == "failed"
    assert row["error"] == {"type": "ZeroDivisionError", "message": "division by zero"}
    assert StepRepository(any_conn).run(serial, REQUEST, lambda: {"paid": 2}) == {"paid": 2}
    any_conn.commit()
    assert [a["state"] for a in attempts(db, serial)] == ["failed", "success"]


def test_context_manager_in_an_aborted_transaction_keeps_the_body_error(
        any_conn: SyncDB, db: psycopg.Connection) -> None:
    serial = new_serial(db)
    with pytest.raises(Exception, match=r"division by zero") as caught, \
            StepRepository(any_conn).step(serial, REQUEST):
        run_sql(any_conn, "SELECT 1/0")
    assert any("not recorded" in note for note in caught.value.__notes__)
    any_conn.rollback()
    assert attempts(db, serial) == []  # rolled back with the caller: the next call proceeds


def test_unified_serial_comes_from_the_propagation_context(any_conn: SyncDB,
                                                           db: psycopg.Connection) -> None:
    serial, unified = new_serial(db), new_serial(db, "unified")
    with unified_serial_context(unified):
        StepRepository(any_conn).begin(serial, REQUEST)
    any_conn.commit()
    assert attempts(db, serial)[0]["unified_serial"] == unified


def test_async_repository(hivenet_app_url: str, db: psycopg.Connection, async_kind: str) -> None:
    serial = new_serial(db)

    async def body() -> dict[str, int]:
        return {"paid": 1}

    async def scenario() -> list[Any]:
        results = []
        async with async_connection(async_kind, hivenet_app_url) as conn:
            for _ in range(2):
                results.append(await AsyncStepRepository(conn).run(serial, REQUEST, body))
                await conn.commit()
            with pytest.raises(StepAlreadySucceeded):
                await AsyncStepRepository(conn).begin(serial, REQUEST, on_success="reject")
        return results

    assert asyncio.run(scenario()) == [{"paid": 1}, {"paid": 1}]
