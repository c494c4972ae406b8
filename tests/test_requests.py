"""Keyed requests (issue 12): one state machine for steps and any idempotency key, against real
PostgreSQL. The state machine itself is proved at length by tests/test_steps.py (a step is the
request of namespace 'hivenet.steps'); here what is particular to keys: their checks, their
namespaces, retention per namespace, the views, and the Python repositories."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from hivenet_db import (
    AsyncRequestRepository,
    InvalidInput,
    RequestMismatch,
    RequestRepository,
    RequestStart,
    StaleAttempt,
    StepAlreadySucceeded,
    StepInProgress,
)
from hivenet_db._execute import SyncDB
from tests.helpers import (
    async_connection,
    behind_a_table_lock,
    explain_to_notices,
    functions_run,
    race,
    scalar,
    sqlstate_of,
    wait_until_blocked,
)
from tests.test_steps import Background, sqlstate

Connect = Callable[..., psycopg.Connection]
ORDER = {"item": "P0001", "quantity": 2}


def key() -> str:
    return f"k-{uuid.uuid4()}"


def begin(conn: psycopg.Connection, namespace: str | None, request_key: str | None,
          request: Any = ORDER, **options: Any) -> Any:
    named = "".join(f", {name} => %({name})s" for name in options)
    return conn.execute(
        f"SELECT * FROM hivenet.begin_request(%(ns)s, %(key)s, %(request)s{named})",
        {"ns": namespace, "key": request_key,
         "request": None if request is None else Jsonb(request), **options},
    ).fetchone()


def finish(conn: psycopg.Connection, namespace: str, request_key: str, attempt: int | None,
           succeeded: bool | None, response: Any = None) -> None:
    conn.execute("SELECT hivenet.finish_request(%s, %s, %s, %s, %s)",
                 (namespace, request_key, attempt, succeeded,
                  None if response is None else Jsonb(response)))


def attempts(db: psycopg.Connection, namespace: str, request_key: str) -> list[dict[str, Any]]:
    return [row[0] for row in db.execute(
        "SELECT to_jsonb(a) FROM hivenet.request_attempt a WHERE namespace = %s AND key = %s "
        "ORDER BY attempt", (namespace, request_key))]


# --- the state machine on keys ---------------------------------------------------------------

def test_a_key_runs_once_and_replays_its_response(db: psycopg.Connection) -> None:
    k = key()
    assert begin(db, "orders", k) == ("started", 1, None)
    with sqlstate("HN030"):  # processing: the unknown state
        begin(db, "orders", k)
    finish(db, "orders", k, 1, True, {"order": "O-1", "status": 201})
    assert begin(db, "orders", k) == ("replayed", 1, {"order": "O-1", "status": 201})
    with sqlstate("HN031"):
        begin(db, "orders", k, on_success="reject")
    with sqlstate("HN032"):
        begin(db, "orders", k, {"item": "P0002", "quantity": 2})


def test_a_failed_key_runs_again_and_fencing_holds(db: psycopg.Connection) -> None:
    k = key()
    begin(db, "pay", k)
    finish(db, "pay", k, 1, False, {"code": "timeout"})
    assert begin(db, "pay", k) == ("started", 2, None)
    with sqlstate("HN033"):
        finish(db, "pay", k, 1, True)
    with sqlstate("HN033"):
        finish(db, "pay", key(), 1, True)
    finish(db, "pay", k, 2, True, {"paid": True})
    assert [a["state"] for a in attempts(db, "pay", k)] == ["failed", "success"]
    assert attempts(db, "pay", k)[0]["error"] == {"code": "timeout"}


def test_namespaces_keep_keys_apart_and_from_steps(db: psycopg.Connection) -> None:
    k = key()
    finish(db, "pay", k, begin(db, "pay", k)[1], True, {"ns": "pay"})
    assert begin(db, "notify", k) == ("started", 1, None)
    assert begin(db, "pay", k) == ("replayed", 1, {"ns": "pay"})
    serial = db.execute("SELECT hivenet.next_system_serial('C0001', 'A01', '01')").fetchone()[0]
    db.execute("SELECT * FROM hivenet.begin_step(%s)", (serial,))
    assert attempts(db, "hivenet.steps", serial)[0]["state"] == "processing"
    with sqlstate("HN001"):  # the steps' namespace is not reachable as a request
        begin(db, "hivenet.steps", serial, None)


@pytest.mark.parametrize(("namespace", "request_key", "named"), [
    (None, "k", "namespace NULL is empty"),
    ("", "k", "namespace '' is empty"),
    ("orders", None, "key NULL is empty"),
    ("orders", "", "key '' is empty"),
    ("orders", "x" * 256, "key '" + "x" * 32 + "'... (256 characters) is longer"),
    ("n" * 256, "k", "namespace '" + "n" * 32 + "'... (256 characters) is longer"),
    ("orders", "a\nb", "key 'a\\x0ab' contains a control character"),
    ("orders", "a\tb", "contains a control character"),
    ("orders", "a\x7fb", "contains a control character"),
    ("orders", "a\u0085b", "contains a control character"),
    ("ord\x01ers", "k", "namespace"),
    ("hivenet.mine", "k", "namespace 'hivenet.mine' is reserved"),
])
def test_bad_namespaces_and_keys_are_invalid_input_naming_them(
        db: psycopg.Connection, namespace: str | None, request_key: str | None,
        named: str) -> None:
    with pytest.raises(psycopg.Error) as caught:
        begin(db, namespace, request_key)
    assert caught.value.sqlstate == "HN001"
    assert named in str(caught.value)
    db.rollback()
    with sqlstate("HN001"):  # finish checks them too (after finding nothing to finish)
        finish(db, namespace or "", request_key or "", 1, True)


def test_the_longest_key_and_any_printable_character_are_accepted(db: psycopg.Connection) -> None:
    for k in ("x" * 255, "订单-12345 ✓", "a b/c?d=e&f#g", "\u00e9\u00a0"):
        assert begin(db, "n" * 255, k)[0] == "started"


@pytest.mark.parametrize("options", [
    {"on_success": "retry"}, {"on_success": None}, {"lease": timedelta(0)}, {"nowait": None},
])
def test_bad_options_are_invalid_input(db: psycopg.Connection, options: dict[str, Any]) -> None:
    k = key()
    with sqlstate("HN001"):
        begin(db, "orders", k, **options)
    assert attempts(db, "orders", k) == []


def test_resolving_needs_a_note_and_fences_the_late_finish(db: psycopg.Connection) -> None:
    k = key()
    begin(db, "pay", k)
    with sqlstate("HN001"):
        db.execute("SELECT hivenet.resolve_request('pay', %s, 1, true, ' ')", (k,))
    db.execute("SELECT hivenet.resolve_request('pay', %s, 1, true, 'bank says paid', "
               "'{\"paid\": true}')", (k,))
    with sqlstate("HN033"):
        finish(db, "pay", k, 1, False)
    [row] = attempts(db, "pay", k)
    assert (row["state"], row["note"], row["response"]) == ("success", "bank says paid",
                                                            {"paid": True})
    assert row["resolved_by"]


# --- concurrency -------------------------------------------------------------------------------

def test_a_concurrent_duplicate_waits_then_replays(connect: Connect) -> None:
    first, second, observer = connect(autocommit=False), connect(), connect()
    k = key()
    assert begin(first, "orders", k) == ("started", 1, None)
    waiter = Background(lambda: begin(second, "orders", k))
    wait_until_blocked(observer, second.info.backend_pid)
    finish(first, "orders", k, 1, True, {"order": "O-1"})
    first.commit()
    assert waiter.result() == ("replayed", 1, {"order": "O-1"})


def test_nowait_fails_at_once(connect: Connect) -> None:
    first, second = connect(autocommit=False), connect()
    second.execute("SET statement_timeout = '10s'")
    k = key()
    begin(first, "orders", k)
    with pytest.raises(psycopg.Error) as caught:
        begin(second, "orders", k, nowait=True)
    assert caught.value.sqlstate == "HN030"
    assert "being started by another transaction" in str(caught.value)
    assert second.execute("SHOW lock_timeout").fetchone()[0] == "0"


def _nowait_state(conn: psycopg.Connection, namespace: str, request_key: str) -> str:
    """A nowait begin's outcome, or the SQLSTATE it raised."""
    try:
        return str(begin(conn, namespace, request_key, nowait=True)[0])
    except psycopg.Error as error:
        conn.rollback()
        return str(error.sqlstate)


def test_nowait_waits_for_a_lock_on_the_whole_table_and_is_no_false_conflict(
        connect: Connect) -> None:
    """nowait refuses only when the key's own row is locked: a wait for anything else (here
    a lock on the whole table; under load, its growth: the extension lock) is waited for as
    by any statement, and the new key starts once it ends. Before, the 1 ms lock_timeout
    over the whole start refused it with HN030."""
    holder, beginner = connect(), connect(autocommit=False)
    k = key()
    assert behind_a_table_lock(holder, beginner, "hivenet.request_attempt",
                               lambda: _nowait_state(beginner, "orders", k)) == "started"
    beginner.commit()
    assert [a["state"] for a in attempts(holder, "orders", k)] == ["processing"]


def test_nowait_in_a_chained_namespace_waits_for_the_chain_not_for_the_key(
        connect: Connect, db: psycopg.Connection) -> None:
    """Each begin of a chained namespace appends its link under the chain's lock, held until
    commit (audit.sql): a nowait begin of a new key waits for it as any begin does, and
    starts once the transaction holding it commits; the key's own lock still answers HN030
    at once."""
    namespace = f"chained-{uuid.uuid4()}"
    db.execute("SELECT hivenet.set_namespace_policy(%s, audit_chain => true)", (namespace,))
    first, second = connect(autocommit=False), connect(autocommit=False)
    held = key()
    assert begin(first, namespace, held)[0] == "started"  # the chain is first's until commit
    assert _nowait_state(second, namespace, held) == "HN030"
    fresh = key()
    waiter = Background(lambda: _nowait_state(second, namespace, fresh))
    wait_until_blocked(db, second.info.backend_pid)
    first.commit()
    assert waiter.result() == "started"
    second.commit()
    assert db.execute("SELECT attempts, problem FROM hivenet.verify_audit_chain(%s)",
                      (namespace,)).fetchone() == (2, None)


@pytest.mark.parametrize(("context", "the_keys"), [
    # As PostgreSQL 15 writes it (measured), and in three of its translations (its catalogs).
    ('while inserting index tuple (0,2) in relation "request_attempt"\nSQL statement "INSERT '
     'INTO hivenet._new_attempt"\nPL/pgSQL function hivenet._start_attempt(text,text,integer,'
     'bytea,text,interval,boolean) line 3 at SQL statement', True),
    ('while updating tuple (4,17) in relation "request_attempt"', True),
    ("lors de l'insertion de l'enregistrement (0, 2) de l'index dans la relation "
     "« request_attempt »", True),
    ('0,2 튜플 인덱스(해당 릴레이션 "request_attempt")를 삽입하는 중에 발생', True),
    ('リレーション"request_attempt"のインデックスタプル(0,2)の挿入中', True),
    # A wait for the audit chain's row, and one no row is named for (a table lock, the
    # table's extension lock).
    ('while locking tuple (0,1) in relation "request_chain"\nSQL statement "SELECT * FROM '
     'hivenet.request_chain c"', False),
    ('SQL statement "INSERT INTO hivenet._new_attempt"\nPL/pgSQL function '
     'hivenet._start_attempt(text,text,integer,bytea,text,interval,boolean) line 3 at SQL '
     'statement', False),
])
def test_the_keys_own_wait_is_told_by_the_row_its_error_names(
        db: psycopg.Connection, context: str, the_keys: bool) -> None:
    assert scalar(db, "SELECT hivenet._waited_for_row(%s, 'request_attempt')",
                  (context,)) is the_keys


def test_16_parallel_duplicates_start_once(connect: Connect) -> None:
    conns = [connect(autocommit=False) for _ in range(16)]
    k = key()

    def act(i: int, conn: psycopg.Connection) -> str:
        outcome, attempt, _ = begin(conn, "orders", k)
        if outcome == "started":
            finish(conn, "orders", k, attempt, True, {"by": i})
        conn.commit()
        return str(outcome)

    results = race(conns, act)
    outcomes = Counter(r if isinstance(r, str) else sqlstate_of(r) for r in results)
    assert outcomes == {"started": 1, "replayed": 15}


# --- the client's exact bytes beside the canonical fingerprint ---------------------------------

def test_raw_request_keeps_the_first_bytes_while_replays_match_the_canonical_form(
        db: psycopg.Connection, any_conn: SyncDB) -> None:
    """In a namespace that keeps them, the attempt keeps the exact bytes the client sent; a
    repeat written otherwise (key order, whitespace, 1.0 for 1) matches by the 'json'
    fingerprint and replays, and the kept bytes stay the first request's."""
    db.execute("SELECT hivenet.set_namespace_policy('signed', fingerprint => 'json', "
               "keep_raw_request => true)")
    first = b'{"amount": 10, "currency": "EUR"}'
    again = b'{ "currency":"EUR","amount":10.0 }'
    app = RequestRepository(any_conn)
    k = key()
    start = app.begin("signed", k, {"amount": 10, "currency": "EUR"}, raw_request=first)
    app.finish("signed", k, start.attempt, True, {"paid": True})
    any_conn.commit()
    assert app.begin("signed", k, {"currency": "EUR", "amount": 10.0},
                     raw_request=again) == RequestStart("replayed", 1, {"paid": True})
    any_conn.commit()
    assert RequestRepository(db).raw_request("signed", k) == first
    assert db.execute("SELECT raw_request, fingerprint = (SELECT fingerprint FROM "
                      "hivenet.request_attempt WHERE namespace = 'signed' AND key = %s) "
                      "FROM hivenet.raw_requests WHERE namespace = 'signed' AND key = %s",
                      (k, k)).fetchall() == [(first, True)]


def test_raw_request_is_kept_only_where_the_namespace_asks(db: psycopg.Connection) -> None:
    k = key()
    begin(db, "plain", k, raw_request=b"{}")  # the default: not kept, the fast path
    assert RequestRepository(db).raw_request("plain", k) is None
    db.execute("SELECT hivenet.set_namespace_policy('kept', keep_raw_request => true)")
    begin(db, "kept", k, raw_request=b"\x00 any bytes")
    begin(db, "kept", key())  # none given: nothing to keep
    assert RequestRepository(db).raw_request("kept", k) == b"\x00 any bytes"
    assert db.execute("SELECT count(*) FROM hivenet.raw_requests WHERE namespace = 'kept'"
                      ).fetchone() == (1,)
    db.execute("SELECT hivenet.set_namespace_policy('kept', keep_raw_request => false)")
    assert db.execute("SELECT count(*) FROM hivenet.request_namespace WHERE namespace = 'kept'"
                      ).fetchone() == (0,)  # false is the default: no policy row
    with sqlstate("HN001"):
        db.execute("SELECT hivenet.set_namespace_policy('hivenet.steps', "
                   "keep_raw_request => true)")


# --- retention ------------------------------------------------------------------------------

def test_retention_per_namespace(db: psycopg.Connection,
                                 fake_clock: Callable[..., None]) -> None:
    db.execute("SELECT hivenet.set_request_retention('short', '1 hour')")
    db.execute("SELECT hivenet.set_request_retention('long', '7 days')")
    fake_clock(db, "2026-11-21 10:00:00+00")
    short, long, default, busy = key(), key(), key(), key()
    for namespace, k in (("short", short), ("long", long), ("default", default)):
        finish(db, namespace, k, begin(db, namespace, k)[1], True, {"ok": namespace})
    begin(db, "short", busy)  # processing: never removed
    fake_clock(db, "2026-11-21 10:59:59+00")
    db.execute("SELECT hivenet.maintain()")
    assert len(attempts(db, "short", short)) == 1  # one second short of its hour
    fake_clock(db, "2026-11-21 11:00:01+00")
    db.execute("SELECT hivenet.maintain()")
    assert attempts(db, "short", short) == []
    assert begin(db, "short", short) == ("started", 1, None)  # removed: the key is new again
    assert len(attempts(db, "short", busy)) == 1
    fake_clock(db, "2026-11-22 10:00:01+00")  # default 24 hours
    db.execute("SELECT hivenet.maintain()")
    assert attempts(db, "default", default) == []
    assert begin(db, "long", long)[0] == "replayed"
    db.execute("SELECT hivenet.set_request_retention('long', NULL)")  # back to the default
    db.execute("SELECT hivenet.maintain()")
    assert attempts(db, "long", long) == []


def test_retention_keeps_a_key_whose_last_attempt_is_recent(
        db: psycopg.Connection, fake_clock: Callable[..., None]) -> None:
    fake_clock(db, "2026-11-21 10:00:00+00")
    k = key()
    finish(db, "orders", k, begin(db, "orders", k)[1], False)
    fake_clock(db, "2026-11-22 09:00:00+00")
    finish(db, "orders", k, begin(db, "orders", k)[1], True, {"ok": 1})
    fake_clock(db, "2026-11-22 11:00:00+00")  # attempt 1 is past 24 hours, attempt 2 is not
    db.execute("SELECT hivenet.maintain()")
    assert [a["state"] for a in attempts(db, "orders", k)] == ["failed", "success"]
    assert begin(db, "orders", k) == ("replayed", 2, {"ok": 1})


def test_failure_retention_purges_failures_before_successes_of_the_same_age(
        db: psycopg.Connection, fake_clock: Callable[..., None]) -> None:
    """A key whose latest attempt failed or expired goes after failure_retention; a success
    begun at the same time stays for retention. Under on_failure 'final' the failure is
    replayed until then, and the key starts afresh after it."""
    db.execute("SELECT hivenet.set_namespace_policy('fr', retention => '1 day', "
               "on_failure => 'final', expire_after => '10 minutes', "
               "failure_retention => '1 hour')")
    fake_clock(db, "2026-11-21 10:00:00+00")
    ok, bad, lost, retried = key(), key(), key(), key()
    finish(db, "fr", ok, begin(db, "fr", ok)[1], True, {"ok": 1})
    finish(db, "fr", bad, begin(db, "fr", bad)[1], False, {"error": "declined"})
    begin(db, "fr", lost)  # left processing: expired by maintain() at 10:30
    fake_clock(db, "2026-11-21 10:30:00+00")
    db.execute("SELECT hivenet.maintain()")
    assert [a["state"] for a in attempts(db, "fr", lost)] == ["expired"]
    fake_clock(db, "2026-11-21 10:59:59+00")
    db.execute("SELECT hivenet.maintain()")
    assert begin(db, "fr", bad) == ("replayed_failure", 1, {"error": "declined"})
    fake_clock(db, "2026-11-21 11:00:01+00")
    db.execute("SELECT hivenet.maintain()")
    assert attempts(db, "fr", bad) == []  # an hour after it failed
    assert [a["state"] for a in attempts(db, "fr", lost)] == ["expired"]  # expired at 10:30
    assert len(attempts(db, "fr", ok)) == 1
    assert begin(db, "fr", bad) == ("started", 1, None)  # the key is new again
    fake_clock(db, "2026-11-21 11:30:01+00")
    db.execute("SELECT hivenet.maintain()")
    assert attempts(db, "fr", lost) == []
    assert begin(db, "fr", ok) == ("replayed", 1, {"ok": 1})
    fake_clock(db, "2026-11-22 10:00:01+00")
    db.execute("SELECT hivenet.maintain()")
    assert attempts(db, "fr", ok) == []  # a success keeps the day of retention
    # In a namespace that retries, a success after a failure keeps the key for retention.
    db.execute("SELECT hivenet.set_namespace_policy('frr', retention => '1 day', "
               "failure_retention => '1 hour')")
    finish(db, "frr", retried, begin(db, "frr", retried)[1], False)
    finish(db, "frr", retried, begin(db, "frr", retried)[1], True, {"ok": 2})
    fake_clock(db, "2026-11-22 12:00:00+00")
    db.execute("SELECT hivenet.maintain()")
    assert [a["state"] for a in attempts(db, "frr", retried)] == ["failed", "success"]


def test_failure_retention_follows_a_shorter_request_retention(
        db: psycopg.Connection, fake_clock: Callable[..., None]) -> None:
    """Set under the default retention, then request_retention shrinks below it: failures go
    with the retention, never later than successes."""
    db.execute("SELECT hivenet.set_namespace_policy('frs', failure_retention => '20 hours')")
    db.execute("UPDATE hivenet.setting SET value = '2 hours' WHERE name = 'request_retention'")
    fake_clock(db, "2026-11-21 10:00:00+00")
    bad = key()
    finish(db, "frs", bad, begin(db, "frs", bad)[1], False)
    fake_clock(db, "2026-11-21 12:00:01+00")
    db.execute("SELECT hivenet.maintain()")
    assert attempts(db, "frs", bad) == []


@pytest.mark.parametrize(("call", "named"), [
    ("set_namespace_policy('fv', failure_retention => '0')",
     "failure_retention of namespace 'fv' 00:00:00 is not between"),
    ("set_namespace_policy('fv', failure_retention => '-1 hour')",
     "failure_retention of namespace 'fv' -01:00:00 is not between"),
    ("set_namespace_policy('fv', failure_retention => '2 days')",
     "failure_retention 2 days of namespace 'fv' is longer than its retention 24:00:00"),
    ("set_namespace_policy('fv', retention => '1 hour', failure_retention => '2 hours')",
     "failure_retention 02:00:00 of namespace 'fv' is longer than its retention 01:00:00"),
    ("set_namespace_policy('hivenet.steps', failure_retention => '1 hour')",
     "failure_retention is no policy of the steps' namespace"),
])
def test_bad_failure_retention_is_invalid_input(db: psycopg.Connection, call: str,
                                                named: str) -> None:
    with pytest.raises(psycopg.Error) as caught:
        db.execute(f"SELECT hivenet.{call}")
    assert caught.value.sqlstate == "HN001", caught.value
    assert named in str(caught.value), caught.value


def test_a_retention_shorter_than_the_failure_retention_is_refused(
        db: psycopg.Connection) -> None:
    db.execute("SELECT hivenet.set_namespace_policy('fs', retention => '2 hours', "
               "failure_retention => '2 hours')")
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT hivenet.set_request_retention('fs', '1 hour')")
    assert caught.value.sqlstate == "HN001"
    assert "failure_retention 02:00:00 of namespace 'fs' is longer than its retention " \
           "01:00:00" in str(caught.value)
    assert db.execute("SELECT retention, failure_retention FROM hivenet.request_namespace "
                      "WHERE namespace = 'fs'").fetchone() == (timedelta(hours=2),) * 2


@pytest.mark.parametrize(("namespace", "retention"), [
    ("orders", timedelta(0)), ("orders", timedelta(hours=-1)), ("", timedelta(hours=1)),
    ("hivenet.steps", timedelta(hours=1)),
])
def test_bad_retention_is_invalid_input(db: psycopg.Connection, namespace: str,
                                        retention: timedelta) -> None:
    with sqlstate("HN001"):
        db.execute("SELECT hivenet.set_request_retention(%s, %s)", (namespace, retention))


@pytest.mark.parametrize("failure_cutoff", [
    # failures kept shorter: the range runs on to their cutoff (here 200 rows further)
    "NULL", "now() - interval '19700 seconds'",
])
def test_retention_deletes_through_the_index_not_by_scanning_live_rows(
        db: psycopg.Connection, failure_cutoff: str) -> None:
    """The purge's candidates come from the index (namespace, started_at): an index range of
    the one namespace below its cutoff, not a scan of the namespace's (or table's) live rows;
    with a failure_retention, up to its later cutoff, the successes in between kept."""
    db.execute("""INSERT INTO hivenet.request_attempt
                      (namespace, key, attempt, state, fingerprint, started_at, finished_at)
                  SELECT 'x', 'k' || n, 1, 'success', '\\x00', now() - n * interval '1 second',
                         now() - n * interval '1 second'
                  FROM generate_series(1, 20000) AS n""")
    db.execute("ANALYZE hivenet.request_attempt")
    explain_to_notices(db)
    db.execute("SET auto_explain.log_min_duration = 0")
    plans: list[str] = []
    db.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    db.execute("SELECT hivenet._purge_requests('x', now() - interval '19900 seconds', NULL, "
               f"{failure_cutoff})")
    purge = "\n".join(p for p in plans if "request_attempt" in p)
    # The failures' longer range may be read as a bitmap of the same index range.
    scans = ("Index Scan using request_attempt_started_at",) if failure_cutoff == "NULL" else (
        "Index Scan using request_attempt_started_at",
        "Bitmap Index Scan on request_attempt_started_at")
    assert any(scan in purge for scan in scans), purge
    assert "Index Cond: (((namespace || ''::text) = 'x'::text) AND (started_at <" in purge, purge
    assert "Seq Scan" not in purge, purge
    assert failure_cutoff != "NULL" or "Bitmap Heap Scan" not in purge, purge
    kept = db.execute("SELECT count(*) FROM hivenet.request_attempt WHERE namespace = 'x'"
                      ).fetchone()[0]
    assert 19890 < kept < 20000  # the ~100 older than the cutoff went


def test_the_hot_path_can_use_only_the_primary_key(connect: Connect) -> None:
    """A session plans begin's and finish's statements once and keeps the plan: planned while
    the table was small and without statistics, an index on the bare (namespace, started_at)
    looked as good as the primary key, and every later finish in that session scanned all
    rows of the namespace through it (64 ms per finish_step after 3000 steps, measured). So
    the retention index is on an expression the hot path's lookups cannot match."""
    indexes = {row[0]: row[1] for row in connect().execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'request_attempt'")}
    assert set(indexes) == {"request_attempt_pkey", "request_attempt_started_at"}
    assert "(((namespace || ''::text)), started_at)" in indexes["request_attempt_started_at"]


# --- views ----------------------------------------------------------------------------------

def test_stuck_requests_and_request_states(db: psycopg.Connection,
                                           fake_clock: Callable[..., None]) -> None:
    fake_clock(db, "2026-11-21 10:00:00+00")
    ns = f"views-{uuid.uuid4()}"
    stuck, done, failed = key(), key(), key()
    begin(db, ns, stuck, lease=timedelta(minutes=1))
    finish(db, ns, done, begin(db, ns, done)[1], True)
    finish(db, ns, failed, begin(db, ns, failed)[1], False)
    serial = db.execute("SELECT hivenet.next_system_serial('C0001', 'A01', '01')").fetchone()[0]
    db.execute("SELECT * FROM hivenet.begin_step(%s, lease => '1 minute')", (serial,))
    fake_clock(db, "2026-11-21 10:01:01+00")
    rows = db.execute("SELECT namespace, key, attempt, processing_for FROM hivenet.stuck_requests "
                      "WHERE namespace = %s", (ns,)).fetchall()
    assert rows == [(ns, stuck, 1, timedelta(minutes=1, seconds=1))]
    assert db.execute("SELECT count(*) FROM hivenet.stuck_requests WHERE key = %s",
                      (serial,)).fetchone()[0] == 0  # steps are in stuck_steps
    states = db.execute("SELECT state, requests FROM hivenet.request_states WHERE namespace = %s",
                        (ns,)).fetchall()
    assert states == [("processing", 1), ("success", 1), ("failed", 1), ("expired", 0)]
    assert db.execute("SELECT count(*) FROM hivenet.request_states "
                      "WHERE namespace = 'hivenet.steps'").fetchone()[0] == 0


@pytest.mark.parametrize("call", [
    "SELECT * FROM hivenet.begin_request('bounds', 'k', lease => %(v)s)",
    "SELECT * FROM hivenet.begin_request('bounds', 'k', lease => %(v)s, nowait => true)",
    "SELECT * FROM hivenet.begin_step(hivenet.next_system_serial('C0001', 'A01', '01'), "
    "lease => %(v)s)",
    "SELECT hivenet.set_request_retention('bounds', %(v)s)",
    "SELECT hivenet.set_claim_expiry('bounds', %(v)s)",
])
def test_every_interval_a_caller_passes_is_bounded(db: psycopg.Connection, call: str) -> None:
    """Issue 29 point 4: a lease of a million years was accepted and broke the views for every
    reader. HN001 names the bound; the bound itself is accepted."""
    for value in ("1000000 years", "10 years 1 second", "0", "-1 day"):
        with pytest.raises(psycopg.Error) as caught:
            db.execute(call, {"v": value})
        assert caught.value.sqlstate == "HN001"
        assert "is not between 0 (excluded) and 10 years" in str(caught.value), caught.value
    db.execute(call, {"v": "10 years"})


def test_the_views_never_fail_on_stored_data(db: psycopg.Connection,
                                             fake_clock: Callable[..., None]) -> None:
    """Attempts and retentions stored before the bound (written here as the owner) leave the
    views, the report's queries and maintain() working; the lease in force is the bound."""
    fake_clock(db, "2026-11-21 10:00:00+00")
    db.execute("""
        INSERT INTO hivenet.request_attempt (namespace, key, attempt, state, fingerprint, lease,
                                             started_at)
        VALUES ('stored', 'k', 1, 'processing', '', '1000000 years', '2000-01-01'),
               ('hivenet.steps', 'C0001A010120000101000000000001', 1, 'processing', '',
                '1000000 years', '2000-01-01');
        INSERT INTO hivenet.request_namespace VALUES ('stored', '1000000 years')""")
    for view in ("stuck_requests", "stuck_steps", "request_states", "step_states"):
        db.execute(f"SELECT * FROM hivenet.{view}").fetchall()
    assert db.execute("SELECT lease_expired_at::date FROM hivenet.stuck_requests "
                      "WHERE namespace = 'stored'").fetchall() == [(date(2010, 1, 1),)]
    db.execute("SELECT hivenet.maintain()")


# --- Python ---------------------------------------------------------------------------------

def test_repository_begin_finish_resolve_and_errors(any_conn: SyncDB,
                                                    db: psycopg.Connection) -> None:
    repo, k = RequestRepository(any_conn), key()
    start = repo.begin("orders", k, ORDER, lease=timedelta(minutes=2))
    assert start == RequestStart("started", 1, None) and start.started
    with pytest.raises(StepInProgress):
        repo.begin("orders", k, ORDER)
    any_conn.rollback()
    start = repo.begin("orders", k, ORDER)
    repo.finish("orders", k, start.attempt, True, {"order": "O-1"})
    with pytest.raises(StaleAttempt):
        repo.finish("orders", k, start.attempt, True)
    any_conn.rollback()
    repo.finish("orders", k, repo.begin("orders", k, ORDER).attempt, True, {"order": "O-1"})
    replayed = repo.begin("orders", k, ORDER)
    assert replayed == RequestStart("replayed", 1, {"order": "O-1"}) and replayed.replayed
    any_conn.commit()
    cases: list[tuple[type[Exception], Callable[[], object]]] = [
        (StepAlreadySucceeded, lambda: repo.begin("orders", k, ORDER, on_success="reject")),
        (RequestMismatch, lambda: repo.begin("orders", k, {"other": 1})),
        (InvalidInput, lambda: repo.begin("orders", "", ORDER)),
        (InvalidInput, lambda: repo.begin("", k, ORDER)),
    ]
    for error, call in cases:
        with pytest.raises(error):
            call()
        any_conn.rollback()
    other = key()
    repo.begin("orders", other, ORDER)
    any_conn.commit()
    admin = RequestRepository(db)  # resolving and retention are administrators'
    admin.resolve("orders", other, 1, False, "never reached the warehouse")
    assert repo.begin("orders", other, ORDER).attempt == 2
    admin.set_retention("orders", timedelta(hours=2))
    admin.set_retention("orders", None)
    any_conn.rollback()


def test_a_new_key_starts_by_the_fast_path_of_every_key(db: psycopg.Connection) -> None:
    """As a new step's: begin_request starts a new key by one INSERT (_start_key, into the one
    writer _new_attempt); nowait, or a key that has an attempt (here a failed one), goes on
    to the full path _begin_key, with no check again for input the fast path vouched for."""
    requests, request_key = RequestRepository(db), key()
    requests.begin("orders", key())  # the namespace's first start makes its counters
    assert functions_run(db, lambda: requests.begin("orders", request_key, {"n": 1})) == {
        "_start_key": 1, "_count_decision": 1}
    requests.finish("orders", request_key, 1, False)
    retry: list[RequestStart] = []
    assert functions_run(db, lambda: retry.append(
        requests.begin("orders", request_key, {"n": 1}))) == {
        "_start_key": 1, "_start_attempt": 2, "_begin_key": 1, "_begin_attempt": 1,
        "_count_decision": 1}
    assert retry == [RequestStart("started", 2)]
    assert functions_run(db, lambda: requests.begin("orders", key(), nowait=True)) == {
        "_start_key": 1, "_begin_key": 1, "_begin_attempt_within": 1,
        "_begin_attempt": 1, "_start_attempt": 1, "_count_decision": 1}


def test_a_key_that_has_an_attempt_still_gets_every_check(db: psycopg.Connection) -> None:
    """After the fast path wrote nothing, _begin_key skips the checks only for input the
    fast path vouches for: a failed key's retry with a lease that is not positive
    or an unknown on_success still raises HN001, writing nothing."""
    request_key = key()
    db.execute("SELECT * FROM hivenet.begin_request('orders', %s)", (request_key,))
    db.execute("SELECT hivenet.finish_request('orders', %s, 1, false)", (request_key,))
    for options in ["lease => interval '0'", "on_success => 'again'"]:
        with sqlstate("HN001"), db.transaction():
            db.execute(f"SELECT * FROM hivenet.begin_request('orders', %s, {options})",
                       (request_key,))
    assert scalar(db, "SELECT count(*) FROM hivenet.request_attempt "
                      "WHERE namespace = 'orders' AND key = %s", (request_key,)) == 1


def test_the_fast_path_starts_what_begin_request_would_and_counts_it(
        db: psycopg.Connection) -> None:
    """_start_key, which begin_request's statement calls and hivenet_app may call directly,
    starts only what begin_request would start, and counts it: never a step (namespace
    hivenet.steps) nor any other name begin_request refuses, nor a key as a step elsewhere
    than in the steps' namespace."""
    serial = scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')")
    start = "SELECT hivenet._start_key(%s, %s, %s, NULL, 'replay', NULL, NULL, false, NULL)"
    for step, namespace, bad_key in [(False, "hivenet.steps", serial),
                                     (False, "orders", "bad\x01key"), (False, "", "k"),
                                     (False, "orders", "k" * 256), (True, "orders", serial)]:
        assert scalar(db, start, (step, namespace, bad_key)) is False, (namespace, bad_key)
    assert scalar(db, "SELECT count(*) FROM hivenet.request_attempt WHERE key = %s",
                  (serial,)) == 0
    counted = ("SELECT decisions FROM hivenet.request_decisions "
               "WHERE namespace = 'orders' AND decision = 'started'")
    db.execute(start, (False, "orders", key()))  # the namespace's first start: its counters
    before = scalar(db, counted)
    assert scalar(db, start, (False, "orders", key())) is True
    assert scalar(db, counted) == before + 1


def test_request_context_manager_and_run(any_conn: SyncDB, db: psycopg.Connection) -> None:
    repo, k, effects = RequestRepository(any_conn), key(), list[int]()
    for _ in range(2):
        with repo.request("orders", k, ORDER) as run:
            if run.started:
                run.response = {"order": len(effects) + 1}
                effects.append(1)
        any_conn.commit()
        assert run.response == {"order": 1}
    assert effects == [1] and run.replayed and run.attempt == 1
    assert (run.namespace, run.key) == ("orders", k)
    failing = key()
    with pytest.raises(ZeroDivisionError), repo.request("orders", failing, ORDER):
        _ = 1 / 0
    any_conn.commit()
    assert attempts(db, "orders", failing)[0]["error"] == {
        "type": "ZeroDivisionError", "message": "division by zero"}
    assert repo.run("orders", failing, ORDER, lambda: {"order": 2}) == {"order": 2}
    assert repo.run("orders", failing, ORDER, lambda: {"order": 3}) == {"order": 2}
    any_conn.commit()


def test_async_repository(hivenet_app_url: str, hivenet_admin_url: str,
                          async_kind: str) -> None:
    k, calls = key(), list[int]()

    async def body() -> dict[str, int]:
        calls.append(1)
        return {"order": len(calls)}

    async def scenario() -> list[Any]:
        results: list[Any] = []
        async with async_connection(async_kind, hivenet_app_url) as conn:
            repo = AsyncRequestRepository(conn)
            for _ in range(2):
                results.append(await repo.run("orders", k, ORDER, body))
                await conn.commit()
            async with repo.request("orders", k, ORDER) as run:
                results.append((run.start.outcome, run.response))
            other = key()
            start = await repo.begin("orders", other, ORDER, nowait=True)
            results.append(start.outcome)
            with pytest.raises(StepInProgress):
                await repo.begin("orders", other, ORDER)
            await conn.rollback()
            await repo.begin("orders", other, ORDER)
            await conn.commit()
            async with async_connection(async_kind, hivenet_admin_url) as admin:  # an operator
                await AsyncRequestRepository(admin).resolve("orders", other, 1, True,
                                                            "checked by hand", {"order": 9})
                await admin.commit()
            results.append((await repo.begin("orders", other, ORDER)).response)
            with pytest.raises(StaleAttempt):
                await repo.finish("orders", other, 1, True)
            await conn.rollback()
        return results

    assert asyncio.run(scenario()) == [{"order": 1}, {"order": 1}, ("replayed", {"order": 1}),
                                       "started", {"order": 9}]
    assert calls == [1]


# --- the example of docs/guides/idempotency.md ----------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["purchase_flow.py", "test_purchase_flow.py"]


def test_the_purchase_flow_example_passes(pytester: pytest.Pytester) -> None:
    for name in EXAMPLES:
        (pytester.path / name).write_text((ROOT / "examples" / name).read_text())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error")
    result.assert_outcomes(passed=3)


def test_docs_show_the_example_as_it_is_tested() -> None:
    docs = (ROOT / "docs" / "guides" / "idempotency.md").read_text()
    assert (ROOT / "examples" / "purchase_flow.py").read_text() in docs
