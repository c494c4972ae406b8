"""The failure policy of a namespace of keyed requests, and of the steps' namespace
(set_namespace_policy's on_failure and expire_after, expiry.sql) against real PostgreSQL: a
final failure is replayed (also through the HTTP middleware), 'retry' runs again, a
`processing` attempt past expire_after becomes `expired` (by a begin, concurrent ones
included, or by maintain()), its late finish is fenced, and the revision's upgrade and
downgrade carry expired attempts."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from alembic import command
from psycopg.types.json import Jsonb

from hivenet_db import RequestRepository, StepRepository
from hivenet_db.tools import migrate
from tests.helpers import explain_to_notices, failure, functions_run, policy, race, scalar
from tests.test_migrations import FROM_0_1_0, _assert_same_catalog, new_db, replay

Connect = Callable[..., psycopg.Connection]
SetClock = Callable[[psycopg.Connection, str], None]

__all__ = ["new_db"]  # the fixture, used by the migration test below

T0 = "2026-03-01 12:00:00+00"


def namespace() -> str:
    return f"pay-{uuid.uuid4().hex[:12]}"


def stored(db: psycopg.Connection, name: str) -> Any:
    return db.execute("SELECT on_failure, expire_after::text FROM hivenet.request_namespace "
                      "WHERE namespace = %s", (name,)).fetchone()


def begin(conn: psycopg.Connection, name: str, key: str,
          request: Any = None) -> tuple[str, int, Any]:
    row = conn.execute("SELECT * FROM hivenet.begin_request(%s, %s, %s)",
                       (name, key, Jsonb(request if request is not None else {"n": 1}))
                       ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def finish(conn: psycopg.Connection, name: str, key: str, attempt: int, succeeded: bool,
           response: Any = None) -> None:
    conn.execute("SELECT hivenet.finish_request(%s, %s, %s, %s, %s)",
                 (name, key, attempt, succeeded, Jsonb(response)))


def attempts(db: psycopg.Connection, name: str, key: str) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT attempt, state::text, finished_at IS NOT NULL, resolved_by, note, error "
        "FROM hivenet.request_attempt WHERE namespace = %s AND key = %s ORDER BY attempt",
        (name, key)).fetchall()


# --- the policy --------------------------------------------------------------------------------

def test_the_policy_is_stored_and_its_defaults_leave_no_row(db: psycopg.Connection) -> None:
    name = namespace()
    policy(db, name, on_failure="final", expire_after="10 minutes")
    assert stored(db, name) == ("final", "00:10:00")
    policy(db, name, retention="2 days")  # NULL leaves them as they are
    assert stored(db, name) == ("final", "00:10:00")
    policy(db, name, on_failure="retry", expire_after="0")  # the defaults: stored as NULL
    assert stored(db, name) == (None, None)
    db.execute("SELECT hivenet.set_request_retention(%s, NULL)", (name,))
    assert stored(db, name) is None  # every default: no row
    code, message = failure(db, "SELECT hivenet.set_namespace_policy(%s, on_failure => %s)",
                            (name, "finally"))
    assert code == "HN001" and "on_failure 'finally'" in message
    code, message = failure(db, "SELECT hivenet.set_namespace_policy(%s, expire_after => %s)",
                            (name, "-5 minutes"))
    assert code == "HN001" and "expire_after of namespace" in message and "-00:05:00" in message
    code, message = failure(db, "SELECT hivenet.set_namespace_policy('hivenet.other', "
                                "on_failure => 'final')")
    assert code == "HN001" and "reserved" in message


def test_a_namespace_with_a_failure_policy_keeps_the_fast_path_for_new_keys(
        db: psycopg.Connection) -> None:
    """The failure policy matters only once a key has an attempt: a new key is still started
    by the fast path, with no PL/pgSQL call of the full path."""
    name = namespace()
    policy(db, name, on_failure="final", expire_after="1 hour")
    db.execute("SET track_functions = 'all'")
    count = ("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
             "WHERE schemaname = 'hivenet' AND funcname IN ('_begin_key', '_begin_attempt')")
    with db.transaction():
        before = scalar(db, count)
        assert begin(db, name, "new-key") == ("started", 1, None)
        assert scalar(db, count) == before


# --- final and retry -----------------------------------------------------------------------------

def test_final_replays_a_failed_attempt_with_its_error(db: psycopg.Connection) -> None:
    name = namespace()
    policy(db, name, on_failure="final")
    assert begin(db, name, "k") == ("started", 1, None)
    finish(db, name, "k", 1, False, {"code": "card_declined"})
    for _ in range(2):  # every repeat, not just the first
        assert begin(db, name, "k") == ("replayed_failure", 1, {"code": "card_declined"})
    assert failure(db, "SELECT * FROM hivenet.begin_request(%s, 'k', %s)",
                   (name, Jsonb({"n": 2})))[0] == "HN032"  # another request: still refused
    assert [row[:2] for row in attempts(db, name, "k")] == [(1, "failed")]
    # Set back to retry, the same failure runs again.
    policy(db, name, on_failure="retry")
    assert begin(db, name, "k") == ("started", 2, None)


def test_retry_is_the_default_and_runs_a_failed_attempt_again(db: psycopg.Connection) -> None:
    for name, values in ((namespace(), {}), (namespace(), {"on_failure": "retry"})):
        if values:
            policy(db, name, **values)
        begin(db, name, "k")
        finish(db, name, "k", 1, False, {"code": "timeout"})
        assert begin(db, name, "k") == ("started", 2, None)


def test_the_repository_tells_a_replayed_failure_from_a_success(
        db: psycopg.Connection, hivenet_app_url: str) -> None:
    name = namespace()
    policy(db, name, on_failure="final")
    calls: list[str] = []

    def body() -> Any:
        calls.append("ran")
        raise RuntimeError("card declined")

    with psycopg.connect(hivenet_app_url) as conn:
        repository = RequestRepository(conn)
        with pytest.raises(RuntimeError):
            repository.run(name, "k", {"amount": 5}, body)
        conn.commit()
        start = repository.begin(name, "k", {"amount": 5})
        assert (start.outcome, start.replayed, start.failed, start.started) == (
            "replayed_failure", True, True, False)
        assert start.response == {"type": "RuntimeError", "message": "card declined"}
        with repository.request(name, "k", {"amount": 5}) as run:
            assert run.replayed and run.failed and run.attempt == 1
        # A success is replayed, not failed.
        repository.run(name, "ok", None, lambda: {"paid": 5})
        success = repository.begin(name, "ok")
        assert (success.replayed, success.failed) == (True, False)
        conn.commit()
    assert calls == ["ran"]


# --- expire_after ------------------------------------------------------------------------------

def test_expire_after_expires_a_processing_attempt_then_retry_starts_anew(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    name = namespace()
    policy(db, name, expire_after="10 minutes")
    fake_clock(db, T0)
    assert begin(db, name, "k") == ("started", 1, None)
    fake_clock(db, "2026-03-01 12:09:59+00")
    assert failure(db, "SELECT * FROM hivenet.begin_request(%s, 'k', %s)",
                   (name, Jsonb({"n": 1})))[0] == "HN030"  # not yet: its outcome is unknown
    fake_clock(db, "2026-03-01 12:10:00+00")
    assert begin(db, name, "k") == ("started", 2, None)
    assert attempts(db, name, "k") == [
        (1, "expired", True, "hivenet.expire_after",
         "expired by policy: processing for longer than expire_after 00:10:00 of the namespace",
         None),
        (2, "processing", False, None, None, None)]
    # The late finish of the expired attempt is fenced; the new one finishes.
    code, message = failure(db, "SELECT hivenet.finish_request(%s, 'k', 1, true)", (name,))
    assert code == "HN033" and "the current is attempt 2, processing" in message
    finish(db, name, "k", 2, True, {"paid": 1})
    code, message = failure(db, "SELECT hivenet.finish_request(%s, 'k', 1, true)", (name,))
    assert code == "HN033"
    assert begin(db, name, "k") == ("replayed", 2, {"paid": 1})


def test_expire_after_with_final_replays_the_expired_attempt_as_a_failure(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    name = namespace()
    policy(db, name, on_failure="final", expire_after="10 minutes")
    fake_clock(db, T0)
    begin(db, name, "k")
    fake_clock(db, "2026-03-01 13:00:00+00")
    assert begin(db, name, "k") == ("replayed_failure", 1, None)
    assert begin(db, name, "k") == ("replayed_failure", 1, None)
    assert [row[:4] for row in attempts(db, name, "k")] == [
        (1, "expired", True, "hivenet.expire_after")]
    for call in ("finish_request(%s, 'k', 1, true)",
                 "resolve_request(%s, 'k', 1, true, 'it did go through')"):
        code, message = failure(db, f"SELECT hivenet.{call}", (name,))
        assert code == "HN033" and "(the current is attempt 1, expired)" in message


def test_an_expiry_is_a_link_of_the_namespace_audit_chain(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    """Expiring writes the end of an attempt as a finish does: in a namespace with an audit
    chain it is the attempt's end link, by a begin and by maintain() alike, and the chain
    verifies (its hash covers the state and the note saying why)."""
    name = namespace()
    policy(db, name, expire_after="10 minutes", audit_chain=True)
    fake_clock(db, T0)
    begin(db, name, "by-begin")
    begin(db, name, "by-maintain")
    fake_clock(db, "2026-03-01 13:00:00+00")
    assert begin(db, name, "by-begin")[:2] == ("started", 2)
    db.execute("SELECT hivenet.maintain()")
    assert [row[1] for row in attempts(db, name, "by-maintain")] == ["expired"]
    verified = db.execute("SELECT problem, attempts, links FROM hivenet.verify_audit_chain(%s)",
                          (name,)).fetchone()
    assert verified == (None, 3, 5)  # three begins, two expiries


def test_a_finish_before_anyone_found_the_attempt_expired_is_accepted(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    """Expiry is decided when a begin or maintain() finds the attempt: until then no caller
    was told otherwise, and its finish stands."""
    name = namespace()
    policy(db, name, expire_after="10 minutes")
    fake_clock(db, T0)
    begin(db, name, "k")
    fake_clock(db, "2026-03-01 13:00:00+00")
    finish(db, name, "k", 1, True, {"paid": 1})
    assert begin(db, name, "k") == ("replayed", 1, {"paid": 1})


def _waiting_for_a_lock(db: psycopg.Connection, pids: list[int]) -> bool:
    return bool(scalar(db, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY (%s) "
                           "AND wait_event_type = 'Lock'", (pids,)) == len(pids))


@pytest.mark.parametrize("on_failure", ["retry", "final"])
def test_concurrent_begins_on_an_expired_attempt_expire_it_once(
        on_failure: str, db: psycopg.Connection, connect: Connect,
        fake_clock: SetClock) -> None:
    """The first begin expires the attempt (and with retry starts attempt 2) in a transaction
    left open; four more begins on their own connections block on its row until it commits,
    then look again: with retry each gets HN030 (attempt 2 is processing), with final each
    replays the failure. One expiry, at most one new attempt."""
    name = namespace()
    policy(db, name, on_failure=on_failure, expire_after="10 minutes")
    fake_clock(db, T0)
    begin(db, name, "k")
    conns = [connect() for _ in range(5)]
    for conn in conns:
        fake_clock(conn, "2026-03-01 13:00:00+00")
    first, others = conns[0], conns[1:]
    first.execute("BEGIN")
    expected = ("started", 2, None) if on_failure == "retry" else ("replayed_failure", 1, None)
    assert begin(first, name, "k") == expected
    results: list[Any] = [None] * len(others)

    def run(i: int) -> None:
        try:
            results[i] = begin(others[i], name, "k")
        except psycopg.Error as error:
            results[i] = error.diag.sqlstate

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(others))]
    for thread in threads:
        thread.start()
    pids = [conn.info.backend_pid for conn in others]
    for _ in range(500):
        if _waiting_for_a_lock(db, pids):
            break
        threading.Event().wait(0.01)
    assert _waiting_for_a_lock(db, pids), "the other begins should wait for the first"
    first.execute("COMMIT")
    for thread in threads:
        thread.join(30)
    if on_failure == "retry":
        assert results == ["HN030"] * 4
        assert [row[:2] for row in attempts(db, name, "k")] == [(1, "expired"),
                                                                (2, "processing")]
    else:
        assert results == [("replayed_failure", 1, None)] * 4
        assert [row[:2] for row in attempts(db, name, "k")] == [(1, "expired")]


def test_a_finish_racing_the_expiring_begin_waits_and_is_fenced(
        db: psycopg.Connection, connect: Connect, fake_clock: SetClock) -> None:
    """The worker of an attempt finishes it while a begin is expiring it: the finish waits
    for the begin's transaction, and once that commits it gets HN033, changing nothing."""
    name = namespace()
    policy(db, name, expire_after="10 minutes")
    fake_clock(db, T0)
    begin(db, name, "k")
    expiring, worker = connect(), connect()
    fake_clock(expiring, "2026-03-01 13:00:00+00")
    expiring.execute("BEGIN")
    assert begin(expiring, name, "k") == ("started", 2, None)
    outcome: list[Any] = []

    def late_finish() -> None:
        try:
            finish(worker, name, "k", 1, True, {"paid": 1})
            outcome.append("finished")
        except psycopg.Error as error:
            outcome.append(error.diag.sqlstate)

    thread = threading.Thread(target=late_finish)
    thread.start()
    for _ in range(500):
        if _waiting_for_a_lock(db, [worker.info.backend_pid]):
            break
        threading.Event().wait(0.01)
    assert _waiting_for_a_lock(db, [worker.info.backend_pid])
    expiring.execute("COMMIT")
    thread.join(30)
    assert outcome == ["HN033"]
    assert [row[:2] for row in attempts(db, name, "k")] == [(1, "expired"), (2, "processing")]


def test_begins_racing_on_expired_attempts_start_exactly_one_new_attempt_each(
        db: psycopg.Connection, connect: Connect, fake_clock: SetClock) -> None:
    """Eight connections released together, each beginning the same 20 expired keys (in
    different orders, in autocommit): every key gets exactly one attempt 2."""
    name = namespace()
    policy(db, name, expire_after="1 minute")
    fake_clock(db, T0)
    keys = [f"k{i}" for i in range(20)]
    for key in keys:
        begin(db, name, key)
    conns = [connect() for _ in range(8)]
    for conn in conns:
        fake_clock(conn, "2026-03-01 12:05:00+00")

    def action(i: int, conn: psycopg.Connection) -> list[Any]:
        outcomes: list[Any] = []
        for key in keys[i % 2::2] + keys[(i + 1) % 2::2]:
            try:
                outcomes.append(begin(conn, name, key)[:2])
            except psycopg.Error as error:
                outcomes.append(error.diag.sqlstate)
        return outcomes

    outcomes: list[Any] = []
    for result in race(conns, action):
        assert isinstance(result, list), result
        outcomes += result
    assert outcomes.count(("started", 2)) == len(keys)
    assert outcomes.count("HN030") == len(keys) * 7
    states = db.execute("SELECT attempt, state::text, count(*) FROM hivenet.request_attempt "
                        "WHERE namespace = %s GROUP BY 1, 2 ORDER BY 1", (name,)).fetchall()
    assert states == [(1, "expired", len(keys)), (2, "processing", len(keys))]


# --- steps: the policy of their namespace, hivenet.steps --------------------------------------

STEPS = "hivenet.steps"


def new_step(db: psycopg.Connection) -> str:
    return str(scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')"))


def begin_step(conn: psycopg.Connection, serial: str) -> tuple[str, int, Any]:
    row = conn.execute("SELECT * FROM hivenet.begin_step(%s, '{\"n\": 1}')", (serial,)
                       ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_the_steps_namespace_takes_the_policy_a_step_can_have(db: psycopg.Connection) -> None:
    policy(db, STEPS, on_failure="final", expire_after="10 minutes", fingerprint="json",
           audit_chain=True)
    assert stored(db, STEPS) == ("final", "00:10:00")
    for field, value in [("retention", "1 day"), ("key_min_length", 8), ("key_pattern", "^C")]:
        code, message = failure(db, "SELECT hivenet.set_namespace_policy('hivenet.steps', "
                                    f"{field} => %s)", (value,))
        assert code == "HN001" and message.startswith(
            f"{field} is no policy of the steps' namespace 'hivenet.steps'"), message
    policy(db, STEPS, on_failure="retry", expire_after="0", fingerprint="bytes",
           audit_chain=False)
    assert stored(db, STEPS) is None  # every default: no row


def test_a_new_step_keeps_the_fast_path_under_a_failure_policy(db: psycopg.Connection) -> None:
    policy(db, STEPS, on_failure="final", expire_after="1 hour")
    begin_step(db, new_step(db))
    serial = new_step(db)
    assert functions_run(db, lambda: begin_step(db, serial)) == {
        "_start_key": 1, "_count_decision": 1}


def test_the_steps_failures_can_be_final(db: psycopg.Connection, hivenet_app_url: str) -> None:
    policy(db, STEPS, on_failure="final")
    serial = new_step(db)
    assert begin_step(db, serial) == ("started", 1, None)
    db.execute("SELECT hivenet.finish_step(%s, 1, false, '{\"code\": \"declined\"}')",
               (serial,))
    for _ in range(2):
        assert begin_step(db, serial) == ("replayed_failure", 1, {"code": "declined"})
    with psycopg.connect(hivenet_app_url) as conn:
        repository = StepRepository(conn)
        start = repository.begin(serial, {"n": 1})
        assert (start.outcome, start.replayed, start.failed) == ("replayed_failure", True, True)
        with repository.step(serial, {"n": 1}) as run:
            assert run.replayed and run.failed and run.response == {"code": "declined"}
        conn.rollback()
    policy(db, STEPS, on_failure="retry")
    assert begin_step(db, serial) == ("started", 2, None)


def test_a_step_left_processing_expires_by_the_steps_policy(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    policy(db, STEPS, expire_after="10 minutes")
    fake_clock(db, T0)
    serial, forgotten = new_step(db), new_step(db)  # dated the fake day
    assert begin_step(db, serial) == ("started", 1, None)
    begin_step(db, forgotten)
    fake_clock(db, "2026-03-01 12:09:59+00")
    assert failure(db, "SELECT * FROM hivenet.begin_step(%s, '{\"n\": 1}')",
                   (serial,))[0] == "HN030"
    fake_clock(db, "2026-03-01 12:10:00+00")
    assert begin_step(db, serial) == ("started", 2, None)
    code, message = failure(db, "SELECT hivenet.finish_step(%s, 1, true)", (serial,))
    assert code == "HN033" and "the current is attempt 2, processing" in message
    db.execute("SELECT hivenet.maintain()")  # and maintain() expires the forgotten one
    assert db.execute("SELECT key, attempt, state::text, resolved_by FROM "
                      "hivenet.request_attempt WHERE namespace = 'hivenet.steps' "
                      "AND key = ANY(%s) ORDER BY key, attempt", ([serial, forgotten],)
                      ).fetchall() == sorted([
        (serial, 1, "expired", "hivenet.expire_after"), (serial, 2, "processing", None),
        (forgotten, 1, "expired", "hivenet.expire_after")])


# --- maintain() and the views ------------------------------------------------------------------

def test_maintain_expires_stale_attempts_a_bounded_number_per_run(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    name, without, young = namespace(), namespace(), namespace()
    policy(db, name, expire_after="10 minutes")
    policy(db, young, expire_after="1 day")
    fake_clock(db, T0)
    db.execute("SELECT hivenet.begin_request(%s, 'k' || i) FROM generate_series(1, 1001) i",
               (name,))
    for other in (without, young):
        begin(db, other, "k")
    fake_clock(db, "2026-03-01 12:09:00+00")
    begin(db, name, "fresh")  # 1 minute old at the run: not yet
    fake_clock(db, "2026-03-01 12:10:00+00")
    stuck = "SELECT count(*) FROM hivenet.stuck_requests WHERE namespace = %s"
    assert scalar(db, stuck, (name,)) == 1001  # past the lease (5 minutes) and processing
    db.execute("SELECT hivenet.maintain()")
    states = ("SELECT state::text, count(*) FROM hivenet.request_attempt WHERE namespace = %s "
              "GROUP BY 1 ORDER BY 1")
    assert db.execute(states, (name,)).fetchall() == [("expired", 1000), ("processing", 2)]
    db.execute("SELECT hivenet.maintain()")  # the next run goes on
    assert db.execute(states, (name,)).fetchall() == [("expired", 1001), ("processing", 1)]
    for other in (without, young):
        assert db.execute(states, (other,)).fetchall() == [("processing", 1)]
    # The views: expired counted in request_states, never listed as stuck.
    assert scalar(db, "SELECT requests FROM hivenet.request_states "
                      "WHERE namespace = %s AND state = 'expired'", (name,)) == 1001
    assert scalar(db, stuck, (name,)) == 0
    assert "expired" in [row[0] for row in db.execute("SELECT state FROM hivenet.step_states")]


def test_maintain_reads_only_what_became_due_since_its_last_run(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    """After its first run in a namespace, maintain()'s expiry reads the index range from
    its mark (the last run's cutoff) to this run's: never the namespace's retained history
    again, nor a scan of the table."""
    policy(db, "x", expire_after="1 hour")
    fake_clock(db, T0)
    db.execute("""INSERT INTO hivenet.request_attempt
                      (namespace, key, attempt, state, fingerprint, started_at, finished_at)
                  SELECT CASE WHEN n % 2 = 0 THEN 'x' ELSE 'y' END, 'k' || n, 1,
                         CASE WHEN n % 1000 = 0 THEN 'processing'
                              ELSE 'success' END::hivenet.step_state,
                         '\\x00', hivenet.now() - n * interval '1 second',
                         CASE WHEN n % 1000 <> 0 THEN hivenet.now() END
                  FROM generate_series(1, 20000) AS n""")
    db.execute("ANALYZE hivenet.request_attempt")
    expired = ("SELECT count(*) FROM hivenet.request_attempt "
               "WHERE namespace = 'x' AND state = 'expired'")
    db.execute("SELECT hivenet.maintain()")
    assert scalar(db, expired) == 17  # n = 4000, 5000, ... 20000: older than 3600 s
    fake_clock(db, "2026-03-01 12:10:00+00")
    explain_to_notices(db)
    db.execute("SET auto_explain.log_min_duration = 0")
    plans: list[str] = []
    db.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    db.execute("SELECT hivenet._maintain_request_expiry()")
    expiry = "\n".join(p for p in plans if "FROM hivenet.request_attempt a" in p
                       and "LIMIT 1000" in p)
    index_range = ("Index Cond: (((namespace || ''::text) = 'x'::text) AND (started_at >= "
                   "'2026-03-01 11:00:00+00'::timestamp with time zone) AND (started_at <= "
                   "'2026-03-01 11:10:00+00'::timestamp with time zone))")
    assert "on request_attempt_started_at" in expiry and index_range in expiry, expiry
    assert "Seq Scan" not in expiry, expiry
    assert scalar(db, expired) == 18  # and n = 3000, due since


# --- the HTTP middleware -----------------------------------------------------------------------

@pytest.fixture
def asgi() -> Iterator[Any]:
    pytest.importorskip("starlette", reason="the middleware needs the extra hivenet-db[asgi]")
    pytest.importorskip("httpx", reason="the tests need httpx (extra test)")
    pytest.importorskip("greenlet", reason="async SQLAlchemy needs the extra hivenet-db[async]")
    from tests import test_asgi
    yield test_asgi


KEY = {"Idempotency-Key": '"3f1e0c1a-9d7b-4b55-a1c2-2b8f8a6e4d10"'}


def test_middleware_replays_a_final_5xx_byte_for_byte(asgi: Any, db: psycopg.Connection,
                                                      hivenet_app_url: str) -> None:
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    policy(db, "http", on_failure="final")  # an administrator's call: db is the owner's
    calls: list[int] = []

    async def handler(request: Request) -> Response:
        calls.append(1)
        return PlainTextResponse("upstream down", status_code=503)

    async def scenario(engine: Any) -> None:
        async with asgi.client(asgi.make_app(engine, handler)) as http:
            first = await http.post("/orders", headers=KEY)
            assert (first.status_code, first.text) == (503, "upstream down")
            assert first.headers["idempotent-replayed"] == "false"
            again = await http.post("/orders", headers=KEY)
            assert (again.status_code, again.text) == (503, "upstream down")
            assert again.headers["idempotent-replayed"] == "true"
            assert again.headers["content-type"] == first.headers["content-type"]

    asgi.run(hivenet_app_url, scenario)
    assert calls == [1]


def test_middleware_answers_a_final_raised_error_or_expiry_with_a_problem(
        asgi: Any, db: psycopg.Connection, hivenet_app_url: str) -> None:
    from starlette.requests import Request
    from starlette.responses import Response
    # an administrator's call: db is the owner's; the middleware runs as the application role
    policy(db, "http", on_failure="final", expire_after="1 millisecond")
    calls: list[int] = []

    async def raising(request: Request) -> Response:
        calls.append(1)
        raise RuntimeError("boom")

    async def scenario(engine: Any) -> None:
        async with asgi.client(asgi.make_app(engine, raising)) as http:
            assert (await http.post("/orders", headers=KEY)).status_code == 500
            again = await http.post("/orders", headers=KEY)
            assert again.status_code == 500 and again.headers["idempotent-replayed"] == "true"
            assert again.json()["idempotency"] == "failed"
        # A request whose handler never finished (cancelled): expired by the next one.
        calls_before = len(calls)
        entered, gate = asyncio.Event(), asyncio.Event()

        async def hanging(request: Request) -> Response:
            entered.set()
            await gate.wait()
            raise AssertionError("never released")

        other = {"Idempotency-Key": '"a-key-whose-handler-hangs"'}
        async with asgi.client(asgi.make_app(engine, hanging)) as http:
            first = asyncio.create_task(http.post("/orders", headers=other))
            await entered.wait()
            first.cancel()
            with pytest.raises(asyncio.CancelledError):
                await first
            await asyncio.sleep(0.01)  # past expire_after (1 ms) on the real clock
            expired = await http.post("/orders", headers=other)
            assert expired.status_code == 500 and expired.json()["idempotency"] == "expired"
            assert expired.headers["idempotent-replayed"] == "true"
        assert len(calls) == calls_before

    asgi.run(hivenet_app_url, scenario)
    assert [row[0] for row in db.execute(
        "SELECT state::text FROM hivenet.request_attempt WHERE namespace = 'http' "
        "ORDER BY key")] == ["failed", "expired"]


# --- the revision ------------------------------------------------------------------------------

def test_upgrade_then_downgrade_with_expired_attempts(new_db: Callable[[], str]) -> None:
    """Upgraded from 0.1.0 (a request left processing there), the value 'expired' works at
    once (0.2.0's revision commits before anything uses it); downgraded, each expired attempt
    is a failed one with a note, retried as 0.1.0 does, and the catalog is 0.1.0's again."""
    released = FROM_0_1_0
    url, at_release = new_db(), new_db()
    replay(url, released)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'")
        conn.execute("SELECT set_config('hivenet.fake_now', %s, false)", (T0,))
        begin(conn, "orders", "left")  # processing under 0.1.0
    replay(url, "head")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT set_config('hivenet.fake_now', '2026-03-01 13:00:00+00', false)")
        policy(conn, "orders", expire_after="10 minutes")
        assert begin(conn, "orders", "left") == ("started", 2, None)
        begin(conn, "orders", "stale")
        conn.execute("SELECT set_config('hivenet.fake_now', '2026-03-01 14:00:00+00', false)")
        # maintain()'s expiry alone: the whole run would add day partitions for the fake
        # clock's dates, which a fresh install of the release has not.
        conn.execute("SELECT hivenet._maintain_request_expiry()")
        assert conn.execute("SELECT key, attempt FROM hivenet.request_attempt "
                            "WHERE state = 'expired' ORDER BY 1, 2").fetchall() == [
            ("left", 1), ("left", 2), ("stale", 1)]
        conn.execute("RESET hivenet.fake_now")
        conn.execute("UPDATE hivenet.setting SET value = 'false' WHERE name = 'allow_fake_clock'")
    command.downgrade(migrate._config(url), released)
    replay(at_release, released)
    _assert_same_catalog(url, at_release, f"downgraded to {released}")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT key, attempt, state::text, note FROM hivenet.request_attempt "
            "WHERE namespace = 'orders' ORDER BY 1, 2").fetchall() == [
            ("left", 1, "failed", "expired by policy: processing for longer than expire_after "
             "00:10:00 of the namespace; marked failed by the downgrade to 0.1.0 (it had "
             "expired)"),
            ("left", 2, "failed", "expired by policy: processing for longer than expire_after "
             "00:10:00 of the namespace; marked failed by the downgrade to 0.1.0 (it had "
             "expired)"),
            ("stale", 1, "failed", "expired by policy: processing for longer than expire_after "
             "00:10:00 of the namespace; marked failed by the downgrade to 0.1.0 (it had "
             "expired)")]
        assert begin(conn, "orders", "stale") == ("started", 2, None)
        assert begin(conn, "steps-still-work", "k") == ("started", 1, None)
