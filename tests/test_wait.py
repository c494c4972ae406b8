"""Waiting for the first outcome (the wait of begin_request and begin_step), against a real
PostgreSQL with real concurrent clients: each thread or task has connections of its own.
What both kinds of key share runs for each (the fixture ``kind``: keyed requests, steps).

In the in-transaction shape (begin, work, finish, commit in one transaction) the duplicate
waits in the database for the first's row, bounded by wait. In the two-transaction shape
(begin commits `processing`) it waits on the client: registered by watch_request, woken by
finish_request's NOTIFY on a listener connection, holding no transaction meanwhile."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from hivenet_db import (
    AsyncRequestRepository,
    AsyncStepRepository,
    AttemptInProgress,
    InvalidInput,
    RequestRepository,
    StepRepository,
)
from hivenet_db._execute import SyncDB, driver_of
from hivenet_db.tools.embedded_postgres import SUPERUSER, EmbeddedPostgres
from hivenet_db.waiting import CHANNEL, FinishListener
from tests.helpers import async_connection, eventually, scalar, wait_until_blocked
from tests.servers import pgbouncer
from tests.test_steps import Background

Connect = Callable[..., psycopg.Connection]
NAMESPACE = "orders"
ORDER = {"item": "P0001", "quantity": 2}


def new_key() -> str:
    return f"k-{uuid.uuid4()}"


@dataclass(frozen=True)
class Kind:
    """One kind of key, as these tests use it: keyed requests of namespace ``orders``, or
    steps (namespace ``hivenet.steps``, a new system serial each)."""

    name: str
    namespace: str
    begin: str   # SQL, parameters (key, request, wait)
    finish: str  # SQL, parameters (key, attempt, succeeded, response)
    repository: Any
    async_repository: Any

    def new_key(self, db: psycopg.Connection) -> str:
        if self.name == "step":
            return str(scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')"))
        return new_key()

    def repo_begin(self, repository: Any, key: str, **options: Any) -> Any:
        if self.name == "step":
            return repository.begin(key, ORDER, **options)
        return repository.begin(NAMESPACE, key, ORDER, **options)


KINDS = {
    "request": Kind("request", NAMESPACE,
                    f"SELECT outcome, attempt, response FROM hivenet.begin_request('{NAMESPACE}', "
                    "%s, %s::jsonb, wait => %s::interval)",
                    f"SELECT hivenet.finish_request('{NAMESPACE}', %s, %s, %s, %s::jsonb)",
                    RequestRepository, AsyncRequestRepository),
    "step": Kind("step", "hivenet.steps",
                 "SELECT outcome, attempt, response FROM hivenet.begin_step(%s, %s::jsonb, "
                 "wait => %s::interval)",
                 "SELECT hivenet.finish_step(%s, %s, %s, %s::jsonb)",
                 StepRepository, AsyncStepRepository),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    return KINDS[request.param]


def begun(conn: psycopg.Connection, key: str, wait: str | None = None,
          kind: Kind = KINDS["request"]) -> tuple[Any, ...]:
    row = conn.execute(kind.begin, (key, json.dumps(ORDER), wait)).fetchone()
    assert row is not None
    return tuple(row)


def finish(conn: psycopg.Connection, key: str, attempt: int, succeeded: bool,
           response: Any, kind: Kind = KINDS["request"]) -> None:
    conn.execute(kind.finish, (key, attempt, succeeded, json.dumps(response)))


def started_and_committed(db: psycopg.Connection, key: str,
                          kind: Kind = KINDS["request"]) -> int:
    """The first attempt, begun and committed (`processing`): the two-transaction shape."""
    outcome, attempt, _ = begun(db, key, kind=kind)
    assert outcome == "started"
    return int(attempt)


def awaited(db: psycopg.Connection, key: str, namespace: str = NAMESPACE) -> bool:
    """Whether the key's processing attempt is marked as waited for (watch_request)."""
    return bool(scalar(db, "SELECT count(*) FROM hivenet.request_attempt WHERE namespace = %s "
                           "AND key = %s AND state = 'processing' AND awaited", (namespace, key)))


def until_registered(db: psycopg.Connection, key: str, namespace: str = NAMESPACE,
                     timeout: float = 10.0) -> None:
    """Return once a waiter registered for the key (its registration committed)."""
    assert eventually(lambda: awaited(db, key, namespace), timeout), "nobody registered to wait"


def idle_outside_transaction(db: psycopg.Connection, pid: int, within: float = 5.0) -> bool:
    """Whether backend pid is idle outside any transaction within ``within`` seconds (after
    registering, a waiter commits and then waits; one that kept its transaction open would
    stay "idle in transaction" for its whole wait)."""
    return eventually(lambda: scalar(db, "SELECT state FROM pg_stat_activity WHERE pid = %s",
                                     (pid,)) == "idle", within)


# --- SQL: the in-transaction shape ---------------------------------------------------------

def test_a_duplicate_waits_for_an_uncommitted_first_and_replays_its_response(
        db: psycopg.Connection, connect: Connect, kind: Kind) -> None:
    first, second = connect(autocommit=False), connect(autocommit=False)
    key = kind.new_key(db)
    assert begun(first, key, kind=kind)[:2] == ("started", 1)
    waiting = Background(lambda: begun(second, key, "10 seconds", kind))
    wait_until_blocked(db, second.info.backend_pid)
    finish(first, key, 1, True, {"order": 7}, kind)
    first.commit()
    assert waiting.result() == ("replayed", 1, {"order": 7})  # no HN030


def test_a_duplicate_of_a_first_rolled_back_starts_it(db: psycopg.Connection,
                                                      connect: Connect, kind: Kind) -> None:
    first, second = connect(autocommit=False), connect(autocommit=False)
    key = kind.new_key(db)
    begun(first, key, kind=kind)
    waiting = Background(lambda: begun(second, key, "10 seconds", kind))
    wait_until_blocked(db, second.info.backend_pid)
    first.rollback()
    assert waiting.result() == ("started", 1, None)


def test_wait_bounds_the_wait_for_an_uncommitted_first(db: psycopg.Connection,
                                                       connect: Connect, kind: Kind) -> None:
    first, second = connect(autocommit=False), connect(autocommit=False)
    key = kind.new_key(db)
    begun(first, key, kind=kind)
    started = time.monotonic()
    with pytest.raises(psycopg.Error) as busy:
        begun(second, key, "300 milliseconds", kind)
    waited = time.monotonic() - started
    assert busy.value.sqlstate == "HN030"
    assert "within wait 00:00:00.3" in str(busy.value.diag.message_primary)
    assert 0.3 <= waited < 5
    second.rollback()
    # the caller's lock_timeout is untouched
    assert scalar(second, "SHOW lock_timeout") == "0"
    # wait 0 is nowait: at once
    started = time.monotonic()
    with pytest.raises(psycopg.Error) as at_once:
        begun(second, key, "0", kind)
    assert at_once.value.sqlstate == "HN030" and time.monotonic() - started < 1


def test_a_committed_processing_attempt_raises_at_once_in_sql(db: psycopg.Connection,
                                                              kind: Kind) -> None:
    """SQL cannot wait for an attempt that holds no lock: the client waits (below)."""
    key = kind.new_key(db)
    started_and_committed(db, key, kind)
    started = time.monotonic()
    with pytest.raises(psycopg.Error) as busy:
        begun(db, key, "5 seconds", kind)
    assert busy.value.sqlstate == "HN030" and time.monotonic() - started < 2


@pytest.mark.parametrize("wait", ["-1 second", "11 years"])
def test_a_wait_out_of_range_is_refused(db: psycopg.Connection, wait: str, kind: Kind) -> None:
    with pytest.raises(psycopg.Error) as refused:
        begun(db, kind.new_key(db), wait, kind)
    assert refused.value.sqlstate == "HN001"
    assert f"wait {scalar(db, 'SELECT %s::interval::text', (wait,))}" in str(refused.value)


# --- SQL: who is notified ----------------------------------------------------------------------

def notified(listener: psycopg.Connection, seconds: float = 0.5) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=seconds)]


def test_finish_notifies_only_a_key_someone_waits_for(db: psycopg.Connection,
                                                      connect: Connect, kind: Kind) -> None:
    listener = connect()
    listener.execute(f"LISTEN {CHANNEL}")
    unwatched, watched = kind.new_key(db), kind.new_key(db)
    finish(db, unwatched, started_and_committed(db, unwatched, kind), True, {}, kind)
    assert notified(listener) == []
    attempt = started_and_committed(db, watched, kind)
    assert scalar(db, "SELECT hivenet.watch_request(%s, %s)",
                  (kind.namespace, watched)) == CHANNEL
    finish(db, watched, attempt, False, {"error": "x"}, kind)
    assert notified(listener) == [json.dumps([kind.namespace, watched])]
    # the next attempt is another: not waited for until watched again
    attempt = started_and_committed(db, watched, kind)
    finish(db, watched, attempt, True, {}, kind)
    assert notified(listener) == []


def test_watching_a_key_that_is_not_in_progress_changes_nothing(db: psycopg.Connection) -> None:
    key = new_key()
    assert scalar(db, "SELECT hivenet.watch_request(%s, %s)", (NAMESPACE, key)) == CHANNEL
    finish(db, key, started_and_committed(db, key), True, {})
    db.execute("SELECT hivenet.watch_request(%s, %s)", (NAMESPACE, key))
    assert scalar(db, "SELECT count(*) FILTER (WHERE awaited) FROM hivenet.request_attempt "
                      "WHERE namespace = %s AND key = %s", (NAMESPACE, key)) == 0


def test_resolve_notifies_too(db: psycopg.Connection, connect: Connect) -> None:
    listener = connect()
    listener.execute(f"LISTEN {CHANNEL}")
    key = new_key()
    attempt = started_and_committed(db, key)
    db.execute("SELECT hivenet.watch_request(%s, %s)", (NAMESPACE, key))
    db.execute("SELECT hivenet.resolve_request(%s, %s, %s, true, 'done by hand', '{}')",
               (NAMESPACE, key, attempt))
    assert notified(listener) == [json.dumps([NAMESPACE, key])]


def test_an_expiry_notifies_too(db: psycopg.Connection, connect: Connect) -> None:
    """maintain() expiring a watched attempt (expire_after) wakes its waiters, as a finish
    would: they look again and meet the namespace's failure policy, not a wait run out."""
    listener = connect()
    listener.execute(f"LISTEN {CHANNEL}")
    name, key = f"wait-expiry-{uuid.uuid4().hex[:8]}", new_key()
    db.execute("SELECT hivenet.set_namespace_policy(%s, expire_after => '1 minute')", (name,))
    db.execute("SELECT hivenet.begin_request(%s, %s)", (name, key))
    db.execute("SELECT hivenet.watch_request(%s, %s)", (name, key))
    db.execute("UPDATE hivenet.request_attempt SET started_at = started_at - interval '1 hour' "
               "WHERE namespace = %s AND key = %s", (name, key))
    db.execute("SELECT hivenet.maintain()")
    assert notified(listener) == [json.dumps([name, key])]


def test_watch_request_checks_its_arguments(db: psycopg.Connection) -> None:
    for args, named in [(("", "k"), "namespace"), (("n", "k\n"), "key")]:
        with pytest.raises(psycopg.Error) as refused:
            db.execute("SELECT hivenet.watch_request(%s, %s)", args)
        assert refused.value.sqlstate == "HN001" and named in str(refused.value)


# --- the repository: the two-transaction shape -------------------------------------------------

@pytest.fixture
def first(connect: Connect) -> psycopg.Connection:
    """The first caller's connection (autocommit: begin commits `processing`)."""
    return connect()


def test_a_duplicate_waits_for_a_committed_first_and_replays_it(
        db: psycopg.Connection, first: psycopg.Connection, any_conn: SyncDB,
        kind: Kind) -> None:
    key = kind.new_key(db)
    attempt = started_and_committed(first, key, kind)
    decisions: list[tuple[str, str, int | None]] = []
    repository = kind.repository(any_conn, on_decision=lambda namespace, _k, decision, at:
                                 decisions.append((namespace, decision, at)))
    pid = driver_of(any_conn).info.backend_pid
    waiting = Background(lambda: kind.repo_begin(repository, key, wait=30))
    until_registered(db, key, kind.namespace)
    assert idle_outside_transaction(db, pid)  # waiting, it holds no transaction
    finish(first, key, attempt, True, {"order": 7}, kind)
    start = waiting.result()
    assert (start.outcome, start.attempt, start.response) == ("replayed", 1, {"order": 7})
    assert decisions == [(kind.namespace, "replayed", 1)]  # one decision for the whole wait


def test_a_duplicate_starts_the_next_attempt_when_the_first_fails(
        db: psycopg.Connection, first: psycopg.Connection, connect: Connect,
        kind: Kind) -> None:
    key = kind.new_key(db)
    attempt = started_and_committed(first, key, kind)
    waiting = Background(lambda: kind.repo_begin(kind.repository(connect(autocommit=False)),
                                                 key, wait=timedelta(seconds=30)))
    until_registered(db, key, kind.namespace)
    finish(first, key, attempt, False, {"error": "declined"}, kind)
    start = waiting.result()
    assert (start.outcome, start.attempt) == ("started", 2)


def test_a_first_that_never_finishes_gives_in_progress_after_the_wait(
        db: psycopg.Connection, first: psycopg.Connection, connect: Connect,
        kind: Kind) -> None:
    key = kind.new_key(db)
    started_and_committed(first, key, kind)
    decisions: list[str] = []
    repository = kind.repository(connect(autocommit=False),
                                 on_decision=lambda _n, _k, decision, _a: decisions.append(
                                     decision))
    started = time.monotonic()
    with pytest.raises(AttemptInProgress) as busy:  # StepInProgress, by its old name
        kind.repo_begin(repository, key, wait=0.5)
    waited = time.monotonic() - started
    assert 0.5 <= waited < 5, waited
    assert "not finished within wait 0:00:00.500000" in busy.value.message
    assert decisions == ["in_progress"]


def test_many_duplicates_all_replay_the_one_outcome(
        db: psycopg.Connection, first: psycopg.Connection, connect: Connect,
        kind: Kind) -> None:
    key = kind.new_key(db)
    attempt = started_and_committed(first, key, kind)
    conns = [connect(autocommit=False) for _ in range(6)]
    waiting = [Background(partial(kind.repo_begin, kind.repository(conn), key, wait=30))
               for conn in conns]
    until_registered(db, key, kind.namespace)
    finish(first, key, attempt, True, {"order": 7}, kind)
    assert {(s.outcome, s.attempt) for s in (w.result() for w in waiting)} == {("replayed", 1)}


def test_without_a_duplicate_wait_changes_nothing(db: psycopg.Connection,
                                                  connect: Connect) -> None:
    conn = connect(autocommit=False)
    key = new_key()
    with RequestRepository(conn).request(NAMESPACE, key, ORDER, wait=5) as run:
        assert run.started
        run.response = {"order": 1}
    conn.commit()
    assert RequestRepository(conn).begin(NAMESPACE, key, ORDER, wait=5).replayed
    assert scalar(db, "SELECT count(*) FILTER (WHERE awaited) FROM hivenet.request_attempt "
                      "WHERE namespace = %s AND key = %s", (NAMESPACE, key)) == 0
    with pytest.raises(InvalidInput):
        RequestRepository(conn).begin(NAMESPACE, key, ORDER, wait=-1)  # checked by Python too


def test_the_async_repository_waits_too(db: psycopg.Connection, first: psycopg.Connection,
                                        async_kind: str, hivenet_app_url: str,
                                        kind: Kind) -> None:
    key = kind.new_key(db)
    attempt = started_and_committed(first, key, kind)

    async def scenario() -> Any:
        async with async_connection(async_kind, hivenet_app_url) as conn:
            waiting = asyncio.ensure_future(kind.repo_begin(kind.async_repository(conn), key,
                                                            wait=30))
            await asyncio.to_thread(until_registered, db, key, kind.namespace)
            await asyncio.to_thread(finish, first, key, attempt, True, {"order": 9}, kind)
            return await waiting

    start = asyncio.run(scenario())
    assert (start.outcome, start.response) == ("replayed", {"order": 9})


def test_a_lost_listener_connection_wakes_the_waiters_who_look_again(
        db: psycopg.Connection, first: psycopg.Connection, connect: Connect,
        hivenet_url: str) -> None:
    key = new_key()
    attempt = started_and_committed(first, key)
    listener = FinishListener(hivenet_url)
    waiting = Background(lambda: RequestRepository(connect(autocommit=False), listener=listener)
                         .begin(NAMESPACE, key, ORDER, wait=30))
    until_registered(db, key)
    db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
               "WHERE query = %s", (f"LISTEN {CHANNEL}",))
    finish(first, key, attempt, True, {"order": 3})  # while it reconnects: no notification
    try:
        assert waiting.result().response == {"order": 3}
    finally:
        listener.close()


# --- through PgBouncer (transaction pooling) ---------------------------------------------------

@pytest.fixture(scope="module")
def bouncer_port(hivenet_server: EmbeddedPostgres) -> Iterator[int]:
    """PgBouncer in transaction pooling with two server connections for the whole test."""
    try:
        with pgbouncer(hivenet_server.port, pool_size=2, max_clients=64,
                       user=SUPERUSER) as port:
            yield port
    except FileNotFoundError as missing:
        pytest.fail(str(missing))


def test_waiters_behind_pgbouncer_hold_no_server_connection(
        db: psycopg.Connection, hivenet_url: str, bouncer_port: int) -> None:
    """Eight duplicates wait through a pool of two server connections: had a waiter kept
    one, the first could not finish. Their listener reaches PostgreSQL directly (LISTEN needs
    a session; transaction pooling keeps none)."""
    dbname = urlsplit(hivenet_url).path.lstrip("/")
    pooled = f"postgresql://{SUPERUSER}@127.0.0.1:{bouncer_port}/{dbname}"
    listener = FinishListener(hivenet_url)

    def through_pool() -> psycopg.Connection:
        return psycopg.connect(pooled, prepare_threshold=None)

    def duplicate(conn: psycopg.Connection) -> Any:
        start = RequestRepository(conn, listener=listener).begin(NAMESPACE, key, ORDER, wait=30)
        conn.commit()  # as a caller does: the server connection goes back to the pool
        return start

    key = new_key()
    with through_pool() as first:
        first.autocommit = True
        attempt = started_and_committed(first, key)
        clients = [through_pool() for _ in range(8)]
        try:
            waiting = [Background(partial(duplicate, conn)) for conn in clients]
            until_registered(db, key)
            time.sleep(0.2)  # let them all get to their wait
            finish(first, key, attempt, True, {"order": 8})
            starts = [w.result() for w in waiting]
        finally:
            for conn in clients:
                conn.close()
            listener.close()
    assert {(s.outcome, s.response["order"]) for s in starts} == {("replayed", 8)}


def _listening_sessions(db: psycopg.Connection) -> int:
    return int(scalar(db, "SELECT count(*) FROM pg_stat_activity WHERE query = %s",
                      (f"LISTEN {CHANNEL}",)))


def test_waiters_behind_pgbouncer_without_a_listener_look_again_and_say_what_to_set(
        db: psycopg.Connection, hivenet_url: str, bouncer_port: int, kind: Kind,
        caplog: pytest.LogCaptureFixture) -> None:
    """Given no listener, the repository's own, on the pooled URL, never LISTENs through the
    pooler (it would hear nothing there): it warns once, naming what to configure, and the
    eight duplicates (through two server connections) look again on their own connections
    at intervals of at most a second, so each replays within a second or so of the finish,
    not after its 30 s wait. Steps as keyed requests."""
    dbname = urlsplit(hivenet_url).path.lstrip("/")
    pooled = f"postgresql://{SUPERUSER}@127.0.0.1:{bouncer_port}/{dbname}"
    key = kind.new_key(db)
    finished: list[float] = []

    def duplicate() -> tuple[Any, float]:
        with psycopg.connect(pooled, prepare_threshold=None) as conn:
            start = kind.repo_begin(kind.repository(conn), key, wait=30)
            conn.commit()
            return start, time.monotonic() - finished[0]

    with caplog.at_level(logging.WARNING, logger="hivenet_db.waiting"), \
            psycopg.connect(pooled, prepare_threshold=None, autocommit=True) as first:
        attempt = started_and_committed(first, key, kind)
        waiting = [Background(duplicate) for _ in range(8)]
        time.sleep(1.5)  # they look again every 0.05 s, then 0.1, 0.2, 0.4, 0.8
        finish(first, key, attempt, True, {"order": 8}, kind)
        finished.append(time.monotonic())
        results = [w.result() for w in waiting]
    assert {(s.outcome, s.response["order"]) for s, _ in results} == {("replayed", 8)}
    assert max(after for _, after in results) < 3.0, [after for _, after in results]
    assert _listening_sessions(db) == 0
    warnings = [r.getMessage() for r in caplog.records if r.name == "hivenet_db.waiting"]
    assert len(warnings) == 1, warnings
    assert "do not LISTEN on " in warnings[0] and f"port={bouncer_port}" in warnings[0]
    assert "listener=FinishListener.shared(url)" in warnings[0]
    assert "HIVENET['IDEMPOTENCY']['listen_url']" in warnings[0]


def test_the_async_repository_behind_pgbouncer_without_a_listener_looks_again(
        db: psycopg.Connection, hivenet_url: str, bouncer_port: int, kind: Kind) -> None:
    dbname = urlsplit(hivenet_url).path.lstrip("/")
    pooled = f"postgresql://{SUPERUSER}@127.0.0.1:{bouncer_port}/{dbname}"
    key = kind.new_key(db)

    async def scenario() -> tuple[Any, float]:
        async with await psycopg.AsyncConnection.connect(pooled, prepare_threshold=None
                                                         ) as conn, \
                await psycopg.AsyncConnection.connect(pooled, prepare_threshold=None,
                                                      autocommit=True) as first:
            outcome = await first.execute(kind.begin, (key, json.dumps(ORDER), None))
            attempt = (await outcome.fetchone() or [None, None])[1]
            waiting = asyncio.ensure_future(kind.repo_begin(kind.async_repository(conn), key,
                                                            wait=30))
            await asyncio.sleep(1.0)
            await first.execute(kind.finish, (key, attempt, True, json.dumps({"order": 9})))
            finished = time.monotonic()
            start = await asyncio.wait_for(waiting, 20)
            return start, time.monotonic() - finished

    start, after = asyncio.run(scenario())
    assert (start.outcome, start.response) == ("replayed", {"order": 9})
    assert after < 3.0, after
    assert _listening_sessions(db) == 0


# --- the HTTP middleware -----------------------------------------------------------------------

def test_a_duplicate_http_request_waits_and_gets_the_first_response(
        db: psycopg.Connection, hivenet_app_url: str) -> None:
    pytest.importorskip("httpx", reason="the tests need httpx (extra test)")
    from tests.test_asgi import KEY, Calls, client, created, make_app, run

    calls = Calls()
    calls.release.clear()
    told: list[str] = []

    async def scenario(engine: Any) -> None:
        app = make_app(engine, created(calls), wait=30,
                       on_decision=lambda _n, _k, decision, _a: told.append(decision))
        async with client(app) as http:
            first = asyncio.create_task(http.post("/orders", content=b"x", headers=KEY))
            await calls.entered.wait()
            second = asyncio.create_task(http.post("/orders", content=b"x", headers=KEY))
            await asyncio.to_thread(until_registered, db, KEY["Idempotency-Key"].strip('"'),
                                    "http")
            calls.release.set()
            answers = [await first, await second]
        assert [answer.status_code for answer in answers] == [201, 201]
        assert answers[1].headers["idempotent-replayed"] == "true"
        assert answers[1].content == answers[0].content

    run(hivenet_app_url, scenario)
    assert calls.count == 1 and told == ["started", "replayed"]


def test_a_duplicate_http_request_gets_409_once_its_wait_is_over(
        hivenet_app_url: str) -> None:
    pytest.importorskip("httpx", reason="the tests need httpx (extra test)")
    from tests.test_asgi import KEY, Calls, client, created, make_app, run

    calls = Calls()
    calls.release.clear()

    async def scenario(engine: Any) -> None:
        async with client(make_app(engine, created(calls), wait=timedelta(seconds=0.4))
                          ) as http:
            first = asyncio.create_task(http.post("/orders", content=b"x", headers=KEY))
            await calls.entered.wait()
            started = time.monotonic()
            second = await http.post("/orders", content=b"x", headers=KEY)
            assert time.monotonic() - started >= 0.4
            assert second.status_code == 409 and second.json()["idempotency"] == "in-flight"
            calls.release.set()
            assert (await first).status_code == 201

    run(hivenet_app_url, scenario)


def test_a_duplicate_http_request_behind_pgbouncer_without_a_listener_gets_the_response(
        db: psycopg.Connection, hivenet_url: str, bouncer_port: int) -> None:
    """The middleware's own listener on a pooled engine: no LISTEN, the duplicate looks
    again and replays within a second or so of the first response."""
    pytest.importorskip("httpx", reason="the tests need httpx (extra test)")
    from sqlalchemy.ext.asyncio import create_async_engine

    from tests.test_asgi import KEY, Calls, client, created, make_app

    dbname = urlsplit(hivenet_url).path.lstrip("/")
    pooled = f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{bouncer_port}/{dbname}"
    calls = Calls()
    calls.release.clear()

    async def scenario() -> float:
        engine = create_async_engine(pooled, connect_args={"prepare_threshold": None})
        try:
            async with client(make_app(engine, created(calls), wait=30)) as http:
                first = asyncio.create_task(http.post("/orders", content=b"x", headers=KEY))
                await calls.entered.wait()
                second = asyncio.create_task(http.post("/orders", content=b"x", headers=KEY))
                await asyncio.sleep(1.0)
                calls.release.set()
                assert (await first).status_code == 201
                released = time.monotonic()
                answer = await asyncio.wait_for(second, 20)
                assert answer.status_code == 201
                assert answer.headers["idempotent-replayed"] == "true"
                return time.monotonic() - released
        finally:
            await engine.dispose()

    assert asyncio.run(scenario()) < 3.0
    assert calls.count == 1
    assert _listening_sessions(db) == 0
