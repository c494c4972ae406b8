"""Decision counts (hivenet_db/sql/decisions.sql, view hivenet.request_decisions, metric
hivenet_request_decisions_total) against a real PostgreSQL: every decision of begin_request
and begin_step counted, also those that raised and rolled back the caller's transaction, as
the application's login (hivenet_app); concurrent begins on real parallel connections, also
the first ones of a new namespace, counted exactly."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest, parser
from sqlalchemy import Engine

from hivenet_db import metrics
from hivenet_db.decisions import DECISIONS
from tests.helpers import in_parallel, policy, scalar, wait_until_blocked
from tests.test_steps import new_serial

Counts = dict[tuple[str, str], int]


def counts(db: psycopg.Connection) -> Counts:
    """The view's rows: (namespace, decision) → decisions."""
    return {(n, d): c for n, d, c in db.execute(
        "SELECT namespace, decision, decisions FROM hivenet.request_decisions")}


def of(db: psycopg.Connection, namespace: str) -> dict[str, int]:
    return {d: c for (n, d), c in counts(db).items() if n == namespace}


@pytest.fixture
def app(hivenet_app_url: str) -> Iterator[Callable[[], psycopg.Connection]]:
    """Connections as the application's login (hivenet_app), not autocommit."""
    opened: list[psycopg.Connection] = []

    def _connect() -> psycopg.Connection:
        opened.append(psycopg.connect(hivenet_app_url))
        return opened[-1]

    yield _connect
    for conn in opened:
        conn.close()


def sqlstate(conn: psycopg.Connection, sql: str, params: Any = None) -> str | None:
    """Run sql; on error roll back and return its SQLSTATE."""
    try:
        conn.execute(sql, params)
    except psycopg.Error as error:
        conn.rollback()
        return error.sqlstate
    return None


BEGIN = "SELECT * FROM hivenet.begin_request('orders', %s, %s::jsonb)"
FINISH = "SELECT hivenet.finish_request('orders', %s, %s, %s, '{\"ok\": 1}')"


def test_a_new_database_counts_steps_and_other_from_zero(db: psycopg.Connection) -> None:
    for namespace in ("hivenet.steps", "hivenet.other"):
        assert of(db, namespace) == dict.fromkeys(DECISIONS, 0)


def test_each_decision_of_a_keyed_request_is_counted_also_when_it_rolled_back(
        app: Callable[[], psycopg.Connection], db: psycopg.Connection) -> None:
    conn, other = app(), app()
    assert of(db, "orders") == {}  # counters come with the namespace's first start
    conn.execute(BEGIN, ("k1", '{"a": 1}'))
    conn.execute(FINISH, ("k1", 1, True))
    conn.commit()
    assert of(db, "orders") == {**dict.fromkeys(DECISIONS, 0), "started": 1}
    conn.execute(BEGIN, ("k1", '{"a": 1}'))  # replayed
    conn.commit()
    # Two transactions: k2 processing, committed; a duplicate raises HN030 and rolls back.
    conn.execute(BEGIN, ("k2", '{"a": 2}'))
    conn.commit()
    assert sqlstate(other, BEGIN, ("k2", '{"a": 2}')) == "HN030"
    assert sqlstate(other, BEGIN, ("k1", '{"a": 9}')) == "HN032"  # mismatch
    assert sqlstate(other, "SELECT * FROM hivenet.begin_request('orders', 'k1', '{\"a\": 1}', "
                    "'reject')") == "HN031"  # rejected: a success repeated under 'reject'
    assert sqlstate(other, "SELECT * FROM hivenet.begin_request('orders', %s)",
                    ("x" * 256,)) == "HN001"  # rejected: key too long
    assert sqlstate(other, "SELECT * FROM hivenet.begin_request('orders', 'k3', NULL, "
                    "'bogus')") == "HN001"  # rejected: an option
    # A start whose transaction rolls back was decided: counted (its retry is counted again).
    other.execute(BEGIN, ("k4", "{}"))
    other.rollback()
    other.execute(BEGIN, ("k4", "{}"))
    other.commit()
    assert of(db, "orders") == {"started": 4, "replayed": 1, "in_progress": 1, "mismatch": 1,
                                "rejected": 3, "expired": 0}
    assert of(db, "hivenet.other") == dict.fromkeys(DECISIONS, 0)


def test_nowait_and_a_key_rule_count_their_refusals(
        app: Callable[[], psycopg.Connection], db: psycopg.Connection) -> None:
    first, second = app(), app()
    first.execute(BEGIN, ("k0", "{}"))  # the namespace's counters, committed
    first.commit()
    first.execute(BEGIN, ("k1", "{}"))  # not committed: a nowait duplicate does not wait
    assert sqlstate(second, "SELECT * FROM hivenet.begin_request('orders', 'k1', '{}', "
                    "nowait => true)") == "HN030"
    first.commit()
    db.execute("SELECT hivenet.set_namespace_policy('orders', key_min_length => 32)")
    assert sqlstate(second, BEGIN, ("short", "{}")) == "HN001"
    assert of(db, "orders") == {**dict.fromkeys(DECISIONS, 0), "started": 2,
                                "in_progress": 1, "rejected": 1}


def test_a_request_the_json_fingerprint_cannot_read_is_counted_rejected(
        app: Callable[[], psycopg.Connection], db: psycopg.Connection) -> None:
    db.execute("SELECT hivenet.set_namespace_policy('orders', fingerprint => 'json')")
    conn = app()
    conn.execute(BEGIN, ("k0", '{"amount": 1}'))  # the namespace's counters, committed
    conn.commit()
    # 1e400: a number no double holds has no RFC 8785 form (HN001), new key or not
    assert sqlstate(conn, BEGIN, ("k1", '{"amount": 1e400}')) == "HN001"
    assert sqlstate(conn, BEGIN, ("k0", '{"amount": 1e400}')) == "HN001"
    assert of(db, "orders") == {**dict.fromkeys(DECISIONS, 0), "started": 1, "rejected": 2}


def test_refusals_no_namespace_can_count_go_to_hivenet_other(
        app: Callable[[], psycopg.Connection], db: psycopg.Connection) -> None:
    conn = app()
    assert sqlstate(conn, "SELECT * FROM hivenet.begin_request(NULL, 'k')") == "HN001"
    assert sqlstate(conn, "SELECT * FROM hivenet.begin_request('hivenet.mine', 'k')") == "HN001"
    # A bad key in a namespace that never started one: its counters would roll back.
    assert sqlstate(conn, "SELECT * FROM hivenet.begin_request('fresh', '')") == "HN001"
    assert of(db, "hivenet.other") == {**dict.fromkeys(DECISIONS, 0), "rejected": 3}
    assert of(db, "fresh") == {}


def test_each_decision_of_a_step_is_counted(app: Callable[[], psycopg.Connection],
                                            db: psycopg.Connection) -> None:
    conn, other = app(), app()
    serial, processing = new_serial(db), new_serial(db)
    begin = "SELECT * FROM hivenet.begin_step(%s, %s::jsonb)"
    conn.execute(begin, (serial, '{"a": 1}'))
    conn.execute("SELECT hivenet.finish_step(%s, 1, true, '{}')", (serial,))
    conn.execute(begin, (processing, "{}"))
    conn.commit()
    conn.execute(begin, (serial, '{"a": 1}'))  # replayed by begin_step's inlined read
    conn.commit()
    assert sqlstate(other, begin, (processing, "{}")) == "HN030"
    assert sqlstate(other, begin, (serial, '{"a": 2}')) == "HN032"
    assert sqlstate(other, begin, ("not a serial", "{}")) == "HN001"
    assert sqlstate(other, begin, ("C0001A0101" "19990101" "000000000001", "{}")) == "HN021"
    assert of(db, "hivenet.steps") == {"started": 2, "replayed": 1, "in_progress": 1,
                                       "mismatch": 1, "rejected": 2, "expired": 0}


def test_a_duplicate_that_waited_for_the_first_is_counted_once(
        app: Callable[[], psycopg.Connection], db: psycopg.Connection) -> None:
    """The duplicate waits for the first start (one key), then replays it: one start, one
    replay, whatever the timing."""
    first, second = app(), app()
    first.execute(BEGIN, ("k1", "{}"))
    pid = second.info.backend_pid
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(
        second.execute(BEGIN, ("k1", "{}")).fetchone()))
    waiter.start()
    wait_until_blocked(db, pid)
    first.execute(FINISH, ("k1", 1, True))
    first.commit()
    waiter.join(30)
    second.commit()
    assert result[0][0] == "replayed"
    assert of(db, "orders")["started"] == 1 and of(db, "orders")["replayed"] == 1


def test_one_statement_counts_each_of_its_begins(app: Callable[[], psycopg.Connection],
                                                 db: psycopg.Connection) -> None:
    """begin_request and begin_step are inlined into the caller's statement: called once per
    row of a query (a key or serial per row), each call is counted, none folded into one."""
    conn, serials = app(), [new_serial(db) for _ in range(5)]
    for serial in serials:
        conn.execute("SELECT * FROM hivenet.begin_step(%s)", (serial,))
        conn.execute("SELECT hivenet.finish_step(%s, 1, true)", (serial,))
    conn.execute("SELECT count(*) FROM generate_series(1, 50) g, "
                 "LATERAL hivenet.begin_request('rows', 'k' || g) b")
    assert scalar(conn, "SELECT count(*) FROM unnest(%s::text[]) s, "
                        "LATERAL hivenet.begin_step(s) b WHERE b.outcome = 'replayed'",
                  (serials,)) == 5
    conn.commit()
    assert of(db, "rows")["started"] == 50
    assert of(db, "hivenet.steps")["replayed"] == 5


THREADS, ROUNDS = 8, 25


def test_concurrent_begins_are_counted_exactly(app: Callable[[], psycopg.Connection],
                                               db: psycopg.Connection) -> None:
    """8 connections released together into a namespace none has used: each makes the
    namespace's counters in its first transaction (none waits for another's), then starts,
    finishes and replays its keys, and repeats a key another is processing."""
    conns = [app() for _ in range(THREADS)]

    def work(conn: psycopg.Connection, barrier: threading.Barrier) -> None:
        barrier.wait()
        for _ in range(ROUNDS):
            k = str(uuid.uuid4())
            conn.execute("SELECT * FROM hivenet.begin_request('burst', %s)", (k,))
            conn.execute("SELECT hivenet.finish_request('burst', %s, 1, true)", (k,))
            conn.commit()
            conn.execute("SELECT * FROM hivenet.begin_request('burst', %s)", (k,))
            conn.commit()

    in_parallel(conns, work)
    assert of(db, "burst") == {**dict.fromkeys(DECISIONS, 0), "started": THREADS * ROUNDS,
                               "replayed": THREADS * ROUNDS}
    makers = scalar(db, "SELECT count(DISTINCT counter) FROM hivenet.decision_counter "
                        "WHERE namespace = 'burst' AND decision = 'started'")
    assert 1 <= makers <= THREADS


def test_concurrent_duplicates_of_one_key_are_counted_exactly(
        app: Callable[[], psycopg.Connection], db: psycopg.Connection) -> None:
    """8 connections begin the same keys at once, nowait: for each key one starts and the
    others raise HN030 (in_progress) or replay it, every one counted in the namespace (its
    counters committed before: see test_refusals_no_namespace_can_count_go_to_hivenet_other)."""
    conns = [app() for _ in range(THREADS)]
    conns[0].execute("SELECT * FROM hivenet.begin_request('dup', 'first')")
    conns[0].commit()
    keys = [str(uuid.uuid4()) for _ in range(ROUNDS)]
    refused = {"HN030": "in_progress", "HN033": "replayed"}  # HN033: attempt 1 is not ours

    def work(conn: psycopg.Connection, barrier: threading.Barrier) -> list[str]:
        outcomes = []
        for k in keys:
            barrier.wait()
            try:
                row = conn.execute("SELECT outcome FROM hivenet.begin_request('dup', %s, "
                                   "nowait => true)", (k,)).fetchone()
                outcome = row[0] if row else "none"
                conn.execute("SELECT hivenet.finish_request('dup', %s, 1, true)", (k,))
                conn.commit()
            except psycopg.Error as error:
                conn.rollback()
                outcome = refused[str(error.sqlstate)]
            outcomes.append(outcome)
        return outcomes

    results = [o for outcomes in in_parallel(conns, work) for o in outcomes]
    counted = of(db, "dup")
    assert results.count("started") == ROUNDS
    assert counted == {**dict.fromkeys(DECISIONS, 0), "started": ROUNDS + 1,
                       "replayed": results.count("replayed"),
                       "in_progress": results.count("in_progress")}


def test_the_reporting_role_reads_the_counts_and_nothing_else(
        app: Callable[[], psycopg.Connection], hivenet_admin_url: str,
        connect: Callable[..., psycopg.Connection]) -> None:
    conn = app()
    conn.execute(BEGIN, ("k1", "{}"))
    conn.commit()
    with psycopg.connect(hivenet_admin_url) as admin:
        assert of(admin, "orders")["started"] == 1
    db = connect()
    db.execute("CREATE ROLE decisions_reader IN ROLE hivenet_reporting")
    try:
        db.execute("SET ROLE decisions_reader")
        assert of(db, "orders")["started"] == 1
        assert sqlstate(db, "SELECT hivenet._count_decision('orders', 'started')") == "42501"
        assert sqlstate(db, "SELECT count(*) FROM hivenet._decision_counters") == "42501"
    finally:
        db.execute("RESET ROLE")
        db.execute("DROP ROLE decisions_reader")


def test_the_metric_is_a_counter_in_the_exposition_and_the_collector(
        app: Callable[[], psycopg.Connection], db: psycopg.Connection,
        hivenet_engine: Engine) -> None:
    conn = app()
    conn.execute(BEGIN, ("k1", "{}"))
    conn.commit()
    assert sqlstate(conn, BEGIN, ("k1", '{"other": 1}')) == "HN032"
    printed = metrics.exposition(metrics.read(db))
    assert "# TYPE hivenet_request_decisions_total counter" in printed
    registry = CollectorRegistry()
    registry.register(metrics.HivenetCollector(hivenet_engine))
    for text in (printed, generate_latest(registry).decode()):
        (family,) = [f for f in parser.text_string_to_metric_families(text)
                     if f.name == "hivenet_request_decisions"]
        assert family.type == "counter"
        values = {(s.labels["namespace"], s.labels["decision"]): s.value
                  for s in family.samples if s.name == "hivenet_request_decisions_total"}
        assert values[("orders", "started")] == 1 and values[("orders", "mismatch")] == 1
        assert values[("orders", "replayed")] == 0
        assert values[("hivenet.steps", "started")] == 0


def test_batches_final_failures_expiries_and_bounded_waits_are_counted(
        app: Callable[[], psycopg.Connection], db: psycopg.Connection) -> None:
    """The other ways in: a batch's new keys (one INSERT of their own) and its other keys
    (begin_request's path); a final failure replayed (a replay); an attempt expired by a
    begin (expired, then the begin's own decision); a duplicate whose wait ran out
    (in_progress); a wait out of range (rejected)."""
    name = f"count-{uuid.uuid4().hex[:12]}"
    db.execute("SELECT hivenet.set_namespace_policy(%s, on_failure => 'final', "
               "expire_after => '10 minutes')", (name,))
    conn = app()
    batch = ("SELECT outcome FROM hivenet.begin_requests(%s, ARRAY['a', 'b', 'c'], "
             "ARRAY['{}', '{}', '{}']::jsonb[])")
    assert conn.execute(batch, (name,)).fetchall() == [("started",)] * 3
    conn.execute("SELECT hivenet.finish_request(%s, 'a', 1, false, '{\"declined\": 1}')",
                  (name,))
    conn.commit()
    # a: a final failure, replayed; b, c: processing, so in_progress.
    assert conn.execute(batch, (name,)).fetchall() == [
        ("replayed_failure",), ("in_progress",), ("in_progress",)]
    conn.commit()
    assert of(db, name) == {**dict.fromkeys(DECISIONS, 0), "started": 3, "replayed": 1,
                            "in_progress": 2}
    # b began in the past: a begin expires it, then replays it as the final failure it is.
    db.execute("UPDATE hivenet.request_attempt SET started_at = started_at - interval '1 hour' "
               "WHERE namespace = %s AND key = 'b'", (name,))
    assert scalar(conn, "SELECT outcome FROM hivenet.begin_request(%s, 'b', '{}')",
                  (name,)) == "replayed_failure"
    conn.commit()
    # d is being started by another transaction (not committed): a wait runs out.
    starting = app()
    starting.execute("SELECT hivenet.begin_request(%s, 'd', '{}')", (name,))
    assert sqlstate(conn, "SELECT * FROM hivenet.begin_request(%s, 'd', '{}', "
                          "wait => '50 milliseconds')", (name,)) == "HN030"
    starting.rollback()
    # A wait out of range is refused: rejected, as any option begin_request refuses.
    assert sqlstate(conn, "SELECT * FROM hivenet.begin_request(%s, 'e', '{}', "
                          "wait => '-1 second')", (name,)) == "HN001"
    assert of(db, name) == {**dict.fromkeys(DECISIONS, 0), "started": 4, "replayed": 2,
                            "in_progress": 3, "expired": 1, "rejected": 1}


def test_the_namespaces_the_application_makes_counters_for_are_bounded(
        db: psycopg.Connection, app: Callable[[], psycopg.Connection]) -> None:
    """One statement of the application's login begins keys in 300 new namespaces (each
    would make six sequences): the first max_counted_namespaces (100) and the declared ones
    get counters of their own (declared: a policy of its own, set by an administrator), the
    others count under hivenet.other; the metrics list the same namespaces, and no more."""
    sequences = "SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relname LIKE 'decisions\\_%'"
    before = scalar(db, sequences)
    policy(db, "declared", retention=dt.timedelta(days=2))
    conn = app()
    conn.execute("SELECT hivenet.begin_request('ns' || g, 'k') FROM generate_series(1, 300) g")
    conn.execute("SELECT hivenet.begin_request('declared', 'k')")
    conn.commit()
    assert scalar(db, sequences) - before == 6 * (100 + 1)
    counted = {n for n, _ in counts(db)}
    assert counted == {f"ns{g}" for g in range(1, 101)} | {"declared", "hivenet.steps",
                                                         "hivenet.other"}
    assert of(db, "hivenet.other")["started"] == 200
    # Given a policy of its own later, a namespace gets counters from its next start.
    policy(db, "ns300", retention=dt.timedelta(days=2))
    conn.execute("SELECT hivenet.begin_request('ns300', 'k2')")
    conn.commit()
    assert of(db, "ns300")["started"] == 1
    read = {m.name: m for m in metrics.read(db)}
    requests = {s.labels["namespace"] for s in read["hivenet_requests"].samples}
    assert requests == counted - {"hivenet.steps"} | {"ns300"}
    assert sum(s.value for s in read["hivenet_requests"].samples
               if s.labels["namespace"] == "hivenet.other") == 199
    assert len(metrics.exposition(metrics.read(db)).splitlines()) < 1500
