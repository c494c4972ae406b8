"""Batches of keyed requests (hivenet.begin_requests, RequestRepository.begin_many) and of
steps (hivenet.begin_steps, StepRepository.begin_many): one outcome per key in one round trip,
each key decided as begin_request / begin_step decides it, against real PostgreSQL with real
parallel connections."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from hivenet_db import (
    AsyncRequestRepository,
    AsyncStepRepository,
    InvalidInput,
    KeyStart,
    RequestRepository,
    StepRepository,
)
from hivenet_db._execute import SyncDB
from hivenet_db.errors import StaleAttempt
from hivenet_db.propagation import unified_serial_context
from tests.helpers import async_connection, failure, race, scalar, wait_until_blocked
from tests.test_steps import begin as begin_step
from tests.test_steps import finish as finish_step
from tests.test_steps import new_serial


def key() -> str:
    return str(uuid.uuid4())


def namespace() -> str:
    return f"batch-{uuid.uuid4().hex[:12]}"


def begin_requests(conn: psycopg.Connection, name: str, keys: list[str],
                   requests: list[Any]) -> list[tuple[str, str, int | None, Any]]:
    return conn.execute(
        "SELECT * FROM hivenet.begin_requests(%s, %s::text[], %s::jsonb[])",
        (name, keys, [None if r is None else Jsonb(r) for r in requests])).fetchall()


def begin(conn: psycopg.Connection, name: str, request_key: str, request: Any) -> int:
    row = conn.execute("SELECT attempt FROM hivenet.begin_request(%s, %s, %s)",
                       (name, request_key, Jsonb(request))).fetchone()
    assert row is not None
    return int(row[0])


def finish(conn: psycopg.Connection, name: str, request_key: str, attempt: int,
           succeeded: bool, response: Any = None) -> None:
    conn.execute("SELECT hivenet.finish_request(%s, %s, %s, %s, %s)",
                 (name, request_key, attempt, succeeded, Jsonb(response)))


def attempts(db: psycopg.Connection, name: str) -> list[tuple[str, int, str]]:
    return db.execute("SELECT key, attempt, state::text FROM hivenet.request_attempt "
                      "WHERE namespace = %s ORDER BY key, attempt", (name,)).fetchall()


def test_a_mixed_batch_gets_one_outcome_per_key_in_order(db: psycopg.Connection) -> None:
    """New, replayed, processing (begun by another committed transaction), mismatch, failed
    (a new attempt) and a key begin_request refuses, in one call: each as begin_request
    decides it, none an error of the call."""
    name = namespace()
    done, busy, other, failed, new = key(), key(), key(), key(), key()
    finish(db, name, done, begin(db, name, done, {"n": 1}), True, {"order": 1})
    begin(db, name, busy, {"n": 2})  # autocommit: processing, committed
    finish(db, name, other, begin(db, name, other, {"n": 3}), True, {"order": 3})
    finish(db, name, failed, begin(db, name, failed, {"n": 4}), False, {"error": "boom"})
    rows = begin_requests(db, name, [new, done, busy, other, failed, "", "x" * 256],
                          [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 99}, {"n": 4}, None, None])
    assert [r[:3] for r in rows] == [
        (new, "started", 1), (done, "replayed", 1), (busy, "in_progress", None),
        (other, "mismatch", None), (failed, "started", 2), ("", "rejected", None),
        ("x" * 256, "rejected", None)]
    assert rows[0][3] is None and rows[1][3] == {"order": 1} and rows[4][3] is None
    assert rows[2][3]["code"] == "HN030" and "is processing (attempt 1" in rows[2][3]["message"]
    assert rows[3][3]["code"] == "HN032" and "another request" in rows[3][3]["message"]
    assert rows[5][3] == {"code": "HN001", "message": "key '' is empty"}
    assert "longer than 255 characters" in rows[6][3]["message"]
    # Written: the new key's attempt 1 and the failed key's attempt 2, processing; nothing for
    # the refused keys, nothing changed for the others.
    assert sorted(attempts(db, name)) == sorted([
        (new, 1, "processing"), (done, 1, "success"), (busy, 1, "processing"),
        (other, 1, "success"), (failed, 1, "failed"), (failed, 2, "processing")])
    # Each started key is finished as after begin_request; a repeat of the batch replays them.
    finish(db, name, new, 1, True, {"order": 0})
    finish(db, name, failed, 2, True, {"order": 4})
    again = begin_requests(db, name, [failed, new], [{"n": 4}, {"n": 0}])
    assert again == [(failed, "replayed", 2, {"order": 4}), (new, "replayed", 1, {"order": 0})]


def test_an_empty_batch_returns_no_row(db: psycopg.Connection) -> None:
    assert begin_requests(db, namespace(), [], []) == []


def test_a_batch_in_a_namespace_with_a_policy(db: psycopg.Connection) -> None:
    """The namespace's fingerprint and key rules apply to every key of a batch, new or not:
    a key breaking a rule is rejected (and never written), the others go on."""
    name = namespace()
    db.execute("SELECT hivenet.set_namespace_policy(%s, fingerprint => 'json', "
               "key_min_length => 36, key_pattern => '^[0-9a-f-]+$')", (name,))
    first, second = key(), key()
    rows = db.execute(
        "SELECT key, outcome, attempt, response->>'message' FROM hivenet.begin_requests("
        "%s, ARRAY[%s, 'short', %s, %s], ARRAY['{\"a\": 1.0}', '{}', '{\"b\": 2}', '{}']::jsonb[])",
        (name, first, second, "Z" * 36)).fetchall()
    assert rows == [
        (first, "started", 1, None),
        ("short", "rejected", None,
         f"key 'short' is shorter than key_min_length 36 of namespace '{name}'"),
        (second, "started", 1, None),
        ("Z" * 36, "rejected", None, f"key '{'Z' * 36}' does not match key_pattern "
                                     f"'^[0-9a-f-]+$' of namespace '{name}'")]
    assert [k for k, _, _ in attempts(db, name)] == sorted([first, second])
    finish(db, name, first, 1, True, {"ok": 1})
    # 'json': 1.0 and 1e0 are one number; another value is another request.
    rows = db.execute("SELECT key, outcome FROM hivenet.begin_requests(%s, ARRAY[%s, %s], "
                      "ARRAY['{ \"a\" : 1e0 }', '{\"b\": 3}']::jsonb[])",
                      (name, first, second)).fetchall()
    assert rows == [(first, "replayed"), (second, "mismatch")]


def test_a_request_the_json_fingerprint_cannot_read_is_that_keys_refusal(
        db: psycopg.Connection) -> None:
    """1e400 has no RFC 8785 form (no double holds it): under 'json' that key, new or not,
    is rejected and counted so; the batch's other keys go on."""
    name = namespace()
    db.execute("SELECT hivenet.set_namespace_policy(%s, fingerprint => 'json')", (name,))
    old, new, fine = key(), key(), key()
    begin_requests(db, name, [old], [{"a": 1}])
    rows = db.execute(
        "SELECT key, outcome, attempt, response->>'code' FROM hivenet.begin_requests(%s, "
        "ARRAY[%s, %s, %s], ARRAY['{\"a\": 1e400}', '{\"a\": 1e400}', '{}']::jsonb[])",
        (name, old, new, fine)).fetchall()
    assert rows == [(old, "rejected", None, "HN001"), (new, "rejected", None, "HN001"),
                    (fine, "started", 1, None)]
    assert db.execute("SELECT decision, decisions FROM hivenet.request_decisions "
                      "WHERE namespace = %s AND decisions > 0 ORDER BY 1",
                      (name,)).fetchall() == [("rejected", 2), ("started", 2)]


@pytest.mark.parametrize(("keys", "requests", "message"), [
    ("NULL", "'{}'::jsonb[]", "keys of the batch in namespace '{ns}' is NULL"),
    ("'{}'::text[]", "NULL", "requests of the batch in namespace '{ns}' is NULL"),
    ("ARRAY['a', 'b']", "ARRAY['{}']::jsonb[]",
     "the batch in namespace '{ns}' has 2 keys but 1 requests"),
    ("ARRAY['a', NULL]", "ARRAY['{}', '{}']::jsonb[]",
     "key 2 of the batch in namespace '{ns}' is NULL"),
    ("ARRAY['a', 'b', 'a']", "array_fill('{}'::jsonb, ARRAY[3])",
     "key 'a' is given more than once in the batch in namespace '{ns}'"),
    ("(SELECT array_agg(i::text) FROM generate_series(1, 1001) i)",
     "array_fill('{}'::jsonb, ARRAY[1001])",
     "the batch in namespace '{ns}' has 1001 keys, more than 1000"),
    ("ARRAY[['a'], ['b']]", "ARRAY['{}', '{}']::jsonb[]",
     "keys (2 dimensions) and requests (1 dimensions) of the batch in namespace '{ns}' are "
     "not both one-dimensional arrays"),
])
def test_a_malformed_batch_is_refused_whole(db: psycopg.Connection, keys: str, requests: str,
                                            message: str) -> None:
    name = namespace()
    code, got = failure(db, f"SELECT * FROM hivenet.begin_requests(%s, {keys}, {requests})",
                        (name,))
    assert (code, got) == ("HN001", message.format(ns=name))
    assert attempts(db, name) == []


@pytest.mark.parametrize(("name", "lease", "message"), [
    ("hivenet.steps", None, "namespace 'hivenet.steps' is reserved"),
    ("", None, "namespace '' is empty"),
    ("orders", "-1 second", "lease -00:00:01 is not between 0 (excluded)"),
])
def test_the_namespace_and_lease_are_checked_as_begin_request_does(
        db: psycopg.Connection, name: str, lease: str | None, message: str) -> None:
    code, got = failure(db, "SELECT * FROM hivenet.begin_requests(%s, ARRAY['k'], "
                            "ARRAY['{}']::jsonb[], %s::interval)", (name, lease))
    assert code == "HN001" and got.startswith(message), got


def test_the_batch_lease_is_each_attempts(db: psycopg.Connection) -> None:
    name, k = namespace(), key()
    db.execute("SELECT * FROM hivenet.begin_requests(%s, ARRAY[%s], ARRAY[NULL]::jsonb[], "
               "'1 hour')", (name, k))
    assert db.execute("SELECT lease::text FROM hivenet.request_attempt WHERE namespace = %s",
                      (name,)).fetchone() == ("01:00:00",)


def test_a_batch_waits_for_a_key_another_transaction_is_starting(
        connect: Any, db: psycopg.Connection) -> None:
    """A key begun by a transaction not yet ended: the batch waits for it, then starts the key
    itself when that transaction rolls back, or finds it processing when it commits."""
    name, k = namespace(), key()
    first, batch = connect(autocommit=False), connect(autocommit=False)
    for end, expected in ((first.rollback, (k, "started", 1)),
                          (first.commit, (k, "in_progress", None))):
        begin(first, name, k, {})
        result: list[Any] = []
        waiter = threading.Thread(target=lambda found=result: found.append(begin_requests(
            batch, name, [key(), k], [{}, {}])))
        waiter.start()
        wait_until_blocked(db, batch.info.backend_pid)
        end()
        waiter.join(30)
        assert result[0][1][:3] == expected
        batch.rollback()


@pytest.mark.parametrize("failed_before", [0, 100])
def test_concurrent_overlapping_batches_start_each_key_exactly_once(
        connect: Any, db: psycopg.Connection, failed_before: int) -> None:
    """Six connections at once, each a batch of 60 keys out of 100 in its own random order,
    begun, finished and committed in one transaction: every key is started by exactly one of
    them, the others replay its response; no batch deadlocks on another. Also when every key
    has a failed attempt already, so that all go through the state machine one by one."""
    name = namespace()
    pool = [key() for _ in range(100)]
    for k in pool[:failed_before]:
        finish(db, name, k, begin(db, name, k, {"k": k}), False)
    conns = [connect(autocommit=False) for _ in range(6)]
    batches = [random.Random(i).sample(pool, 60) for i in range(len(conns))]

    def client(i: int, conn: psycopg.Connection) -> list[tuple[str, str, Any]]:
        rows = begin_requests(conn, name, batches[i], [{"k": k} for k in batches[i]])
        for k, outcome, attempt, _ in rows:
            if outcome == "started":
                finish(conn, name, k, int(attempt or 0), True, {"by": i})
        conn.commit()
        return [(k, outcome, response) for k, outcome, _, response in rows]

    results = race(conns, client)
    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    started: Counter[str] = Counter()
    by: dict[str, int] = {}
    for i, rows in enumerate(results):
        assert not isinstance(rows, BaseException)
        assert [k for k, _, _ in rows] == batches[i]  # in the order of the keys
        for k, outcome, _ in rows:
            assert outcome in ("started", "replayed"), (k, outcome)
            if outcome == "started":
                started[k] += 1
                by[k] = i
    covered = {k for b in batches for k in b}
    assert started == Counter(dict.fromkeys(covered, 1))
    for rows in results:
        assert not isinstance(rows, BaseException)
        for k, outcome, response in rows:
            if outcome == "replayed":
                assert response == {"by": by[k]}
    assert len(attempts(db, name)) == len(covered) + failed_before


def finish_requests(conn: psycopg.Connection, name: str, keys: list[str], attempts: list[int],
                    succeeded: list[bool | None], responses: list[Any]) -> None:
    conn.execute("SELECT hivenet.finish_requests(%s, %s::text[], %s::integer[], %s::boolean[], "
                 "%s::jsonb[])", (name, keys, attempts, succeeded,
                                  [None if r is None else Jsonb(r) for r in responses]))


def test_finish_requests_finishes_a_batch_all_or_nothing(db: psycopg.Connection) -> None:
    """One call finishes each started key as finish_request would; a key finish_request
    refuses (a stale attempt, succeeded NULL) raises its error and nothing is finished."""
    name = namespace()
    k1, k2, k3, k4 = key(), key(), key(), key()
    begin_requests(db, name, [k1, k2, k3, k4], [None] * 4)
    finish_requests(db, name, [k1, k2], [1, 1], [True, False], [{"ok": 1}, {"error": "x"}])
    assert db.execute("SELECT key, state::text, response, error, finished_at IS NOT NULL "
                      "FROM hivenet.request_attempt WHERE namespace = %s AND key IN (%s, %s) "
                      "ORDER BY key = %s DESC", (name, k1, k2, k1)).fetchall() == [
        (k1, "success", {"ok": 1}, None, True), (k2, "failed", None, {"error": "x"}, True)]
    code, message = failure(
        db, "SELECT hivenet.finish_requests(%s, ARRAY[%s, %s], ARRAY[1, 1], ARRAY[true, true], "
            "ARRAY[NULL, NULL]::jsonb[])", (name, k3, k1))
    assert (code, message) == ("HN033", f"attempt 1 of request '{k1}' in namespace '{name}' is "
                                        "not the current processing attempt (the current is "
                                        "attempt 1, success)")
    code, message = failure(
        db, "SELECT hivenet.finish_requests(%s, ARRAY[%s, %s], ARRAY[1, 1], ARRAY[true, NULL], "
            "ARRAY[NULL, NULL]::jsonb[])", (name, k3, k4))
    assert (code, message) == ("HN001", f"request '{k4}' in namespace '{name}' attempt 1: "
                                        "succeeded is NULL")
    assert [state for k, _, state in attempts(db, name) if k in (k3, k4)] == ["processing"] * 2
    finish_requests(db, name, [], [], [], [])


@pytest.mark.parametrize(("call", "message"), [
    ("ARRAY['a', 'b'], ARRAY[1], ARRAY[true, true], ARRAY[NULL, NULL]::jsonb[]",
     "the batch in namespace '{ns}' has 2 keys but 1 attempts and 2 succeeded"),
    ("ARRAY['a'], ARRAY[1], NULL, ARRAY[NULL]::jsonb[]",
     "the batch in namespace '{ns}' has 1 keys but 1 attempts and NULL succeeded"),
    ("ARRAY['a'], ARRAY[1], ARRAY[true], ARRAY[]::jsonb[]",
     "the batch in namespace '{ns}' has 1 keys but 0 responses"),
    ("ARRAY['a', 'a'], ARRAY[1, 1], ARRAY[true, true], ARRAY[NULL, NULL]::jsonb[]",
     "key 'a' is given more than once in the batch in namespace '{ns}'"),
])
def test_a_malformed_finish_is_refused_whole(db: psycopg.Connection, call: str,
                                             message: str) -> None:
    name = namespace()
    assert failure(db, f"SELECT hivenet.finish_requests(%s, {call})", (name,)) == (
        "HN001", message.format(ns=name))


def test_the_repository_begins_and_finishes_a_batch(any_conn: SyncDB) -> None:
    name, told = namespace(), []
    repo = RequestRepository(any_conn, on_decision=lambda *args: told.append(args))
    done, new, bad = key(), key(), "k\x01"
    repo.finish(name, done, repo.begin(name, done, {"n": 1}).attempt, True, {"order": 1})
    starts = repo.begin_many(name, [new, done, bad], [{"n": 2}, {"n": 1}, None])
    assert starts[:2] == [KeyStart(new, "started", 1), KeyStart(done, "replayed", 1, {"order": 1})]
    assert starts[0].started and starts[1].replayed and not starts[2].started
    assert (starts[2].outcome, starts[2].attempt) == ("rejected", None)
    assert starts[2].error == "key 'k\\x01' contains a control character"
    assert told == [(name, done, "started", 1), (name, new, "started", 1),
                    (name, done, "replayed", 1), (name, bad, "rejected", None)]
    repo.finish_many(name, [s.finished(True, {"order": 2}) for s in starts if s.started])
    with pytest.raises(ValueError, match="was not started"):
        starts[1].finished(True)
    assert repo.begin_many(name, [new], [{"n": 3}])[0].outcome == "mismatch"
    assert repo.begin_many(name, [new], [{"n": 2}]) == [KeyStart(new, "replayed", 1, {"order": 2})]
    repo.finish_many(name, [])
    with pytest.raises(StaleAttempt):
        repo.finish_many(name, [(new, 1, True, None)])
    any_conn.rollback()
    with pytest.raises(InvalidInput, match="key holds a NUL character"):
        repo.begin_many(name, [new, "a\x00"], [None, None])
    with pytest.raises(InvalidInput, match="attempt 4294967296 is out of range"):
        repo.finish_many(name, [(new, 2**32, True, None)])
    with pytest.raises(InvalidInput, match="has 1 keys but 2 requests"):
        repo.begin_many(name, [new], [None, None])
    any_conn.rollback()


def test_the_async_repository_begins_and_finishes_a_batch(hivenet_app_url: str,
                                                          async_kind: str) -> None:
    name, told = namespace(), []
    keys = [key(), key()]

    async def scenario() -> list[Any]:
        async with async_connection(async_kind, hivenet_app_url) as conn:
            repo = AsyncRequestRepository(conn, on_decision=lambda *args: told.append(args))
            starts = await repo.begin_many(name, keys, [{"n": 1}, {"n": 2}])
            await repo.finish_many(name, [s.finished(False, {"error": "x"}) for s in starts])
            await conn.commit()
            again = await repo.begin_many(name, keys, [{"n": 1}, {"n": 2}])
            await conn.rollback()
            return [s.outcome for s in starts] + [(s.outcome, s.attempt) for s in again]

    assert asyncio.run(scenario()) == ["started", "started", ("started", 2), ("started", 2)]
    assert [d[2] for d in told] == ["started"] * 4


# --- batches of steps ------------------------------------------------------------------------

def begin_steps(conn: psycopg.Connection, serials: Sequence[str | None], requests: list[Any],
                **options: Any) -> list[tuple[str, str, int | None, Any]]:
    named = "".join(f", {name} => %({name})s" for name in options)
    return conn.execute(
        f"SELECT * FROM hivenet.begin_steps(%(serials)s::text[], %(requests)s::jsonb[]{named})",
        {"serials": serials, "requests": [None if r is None else Jsonb(r) for r in requests],
         **options}).fetchall()


def step_attempts(db: psycopg.Connection, serials: list[str]) -> list[tuple[str, int, str, Any]]:
    return db.execute("SELECT key, attempt, state::text, unified_serial FROM "
                      "hivenet.request_attempt WHERE namespace = 'hivenet.steps' "
                      "AND key = ANY(%s) ORDER BY key, attempt", (serials,)).fetchall()


def test_a_mixed_batch_of_steps_gets_one_outcome_per_serial_in_order(
        db: psycopg.Connection) -> None:
    """As a batch of keyed requests, with what begin_step checks of a serial: new, replayed,
    processing, mismatch, failed (a new attempt), and serials begin_step refuses (not a
    system serial: HN001; dated outside the window: HN021), each as begin_step decides it;
    every started step records the batch's unified serial."""
    unified = new_serial(db, "unified")
    done, busy, other, failed, new = (new_serial(db) for _ in range(5))
    finish_step(db, done, begin_step(db, done, {"n": 1})[1], True, {"paid": 1})
    begin_step(db, busy, {"n": 2})  # autocommit: processing, committed
    finish_step(db, other, begin_step(db, other, {"n": 3})[1], True, {"paid": 3})
    finish_step(db, failed, begin_step(db, failed, {"n": 4})[1], False, {"error": "x"})
    old = "C0001A0101" + "20200101" + new[18:]
    rows = begin_steps(db, [new, done, busy, other, failed, "not a serial", old],
                       [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 99}, {"n": 4}, None, None],
                       unified_serial=unified)
    assert [r[:3] for r in rows] == [
        (new, "started", 1), (done, "replayed", 1), (busy, "in_progress", None),
        (other, "mismatch", None), (failed, "started", 2), ("not a serial", "rejected", None),
        (old, "rejected", None)]
    assert rows[1][3] == {"paid": 1}
    assert rows[2][3]["code"] == "HN030" and rows[3][3]["code"] == "HN032"
    assert rows[5][3]["code"] == "HN001" and "no valid system serial" in rows[5][3]["message"]
    assert rows[6][3]["code"] == "HN021" and "outside the window" in rows[6][3]["message"]
    stored = step_attempts(db, [new, failed, old, "not a serial"])
    assert stored == sorted([(new, 1, "processing", unified), (failed, 1, "failed", None),
                             (failed, 2, "processing", unified)])
    finish_step(db, new, 1, True, {"paid": 0})
    assert begin_steps(db, [new], [{"n": 0}]) == [(new, "replayed", 1, {"paid": 0})]


@pytest.mark.parametrize(("call", "message"), [
    ("NULL, '{}'::jsonb[]", "system serials of the batch of steps is NULL"),
    ("ARRAY['a', 'b'], ARRAY['{}']::jsonb[]",
     "the batch of steps has 2 system serials but 1 requests"),
    ("ARRAY['a', NULL], ARRAY['{}', '{}']::jsonb[]",
     "system serial 2 of the batch of steps is NULL"),
    ("ARRAY['a', 'a'], ARRAY['{}', '{}']::jsonb[]",
     "system serial 'a' is given more than once in the batch of steps"),
    ("ARRAY['a'], ARRAY['{}']::jsonb[], lease => '-1 second'",
     "lease -00:00:01 is not between 0 (excluded) and 10 years"),
])
def test_a_malformed_batch_of_steps_is_refused_whole(db: psycopg.Connection, call: str,
                                                     message: str) -> None:
    assert failure(db, f"SELECT * FROM hivenet.begin_steps({call})") == ("HN001", message)


def test_a_batch_of_steps_waits_for_a_step_another_transaction_is_starting(
        connect: Any, db: psycopg.Connection) -> None:
    serial = new_serial(db)
    first, batch = connect(autocommit=False), connect(autocommit=False)
    begin_step(first, serial)
    result: list[Any] = []
    waiter = threading.Thread(target=lambda: result.append(begin_steps(
        batch, [new_serial(db), serial], [None, None])))
    waiter.start()
    wait_until_blocked(db, batch.info.backend_pid)
    first.rollback()
    waiter.join(30)
    assert result[0][1][:3] == (serial, "started", 1)
    batch.rollback()


def test_concurrent_overlapping_batches_of_steps_start_each_step_exactly_once(
        connect: Any, db: psycopg.Connection) -> None:
    """Four connections at once, each a batch of 30 steps out of 50 in its own random order:
    every step is started by exactly one of them, the others replay its response."""
    pool = [new_serial(db) for _ in range(50)]
    conns = [connect(autocommit=False) for _ in range(4)]
    batches = [random.Random(i).sample(pool, 30) for i in range(len(conns))]

    def client(i: int, conn: psycopg.Connection) -> list[tuple[str, str, Any]]:
        rows = begin_steps(conn, batches[i], [{"s": k} for k in batches[i]])
        started = [(k, int(a or 0)) for k, outcome, a, _ in rows if outcome == "started"]
        conn.execute("SELECT hivenet.finish_steps(%s::text[], %s::integer[], %s::boolean[], "
                     "%s::jsonb[])", ([k for k, _ in started], [a for _, a in started],
                                      [True] * len(started), [Jsonb({"by": i})] * len(started)))
        conn.commit()
        return [(k, outcome, response) for k, outcome, _, response in rows]

    results = race(conns, client)
    assert not [r for r in results if isinstance(r, BaseException)], results
    started: Counter[str] = Counter()
    for rows in results:
        assert not isinstance(rows, BaseException)
        for k, outcome, _ in rows:
            assert outcome in ("started", "replayed"), (k, outcome)
            started[k] += outcome == "started"
    assert started == Counter(dict.fromkeys({k for b in batches for k in b}, 1))


def test_finish_steps_finishes_a_batch_all_or_nothing(db: psycopg.Connection) -> None:
    s1, s2, s3 = (new_serial(db) for _ in range(3))
    begin_steps(db, [s1, s2, s3], [None] * 3)
    db.execute("SELECT hivenet.finish_steps(ARRAY[%s, %s], ARRAY[1, 1], ARRAY[true, false], "
               "ARRAY['{\"ok\": 1}', NULL]::jsonb[])", (s1, s2))
    assert [r[2] for r in step_attempts(db, [s1, s2])] == (
        ["success", "failed"] if s1 < s2 else ["failed", "success"])
    code, message = failure(db, "SELECT hivenet.finish_steps(ARRAY[%s, %s], ARRAY[1, 1], "
                                "ARRAY[true, true], ARRAY[NULL, NULL]::jsonb[])", (s3, s1))
    assert (code, message) == ("HN033", f"attempt 1 of step '{s1}' is not the current "
                                        "processing attempt (the current is attempt 1, success)")
    assert step_attempts(db, [s3])[0][2] == "processing"
    assert failure(db, "SELECT hivenet.finish_steps(ARRAY['a'], ARRAY[1], NULL, "
                       "ARRAY[NULL]::jsonb[])") == (
        "HN001", "the batch of steps has 1 system serials but 1 attempts and NULL succeeded")


def test_a_batch_of_steps_follows_the_steps_policy(db: psycopg.Connection) -> None:
    """The steps' namespace policy applies to a batch of steps as to begin_step: their
    failures final (a failed step replayed as 'replayed_failure' with its error) and their
    fingerprint 'json' (1.0 and 1 are one number)."""
    failed, new = new_serial(db), new_serial(db)
    finish_step(db, failed, begin_step(db, failed, {"a": 1})[1], False, {"error": "declined"})
    db.execute("SELECT hivenet.set_namespace_policy('hivenet.steps', on_failure => 'final', "
               "fingerprint => 'json')")
    try:
        rows = begin_steps(db, [failed, new], [{"a": 1}, {"a": 1.0}])
        assert rows == [(failed, "replayed_failure", 1, {"error": "declined"}),
                        (new, "started", 1, None)]
        finish_step(db, new, 1, True, {"paid": 1})
        assert begin_steps(db, [new], [{"a": 1}]) == [(new, "replayed", 1, {"paid": 1})]
    finally:
        db.execute("SELECT hivenet.set_namespace_policy('hivenet.steps', on_failure => 'retry', "
                   "fingerprint => 'bytes')")


def test_the_step_repository_begins_and_finishes_a_batch(any_conn: SyncDB,
                                                         db: psycopg.Connection) -> None:
    told: list[Any] = []
    repo = StepRepository(any_conn, on_decision=lambda *args: told.append(args))
    unified = new_serial(db, "unified")
    done, new = new_serial(db), new_serial(db)
    repo.finish(done, repo.begin(done, {"n": 1}).attempt, True, {"paid": 1})
    with unified_serial_context(unified):  # the unified serial of the business transaction
        starts = repo.begin_many([new, done, "bad"], [{"n": 2}, {"n": 1}, None])
    assert starts[:2] == [KeyStart(new, "started", 1), KeyStart(done, "replayed", 1, {"paid": 1})]
    assert (starts[2].outcome, starts[2].attempt) == ("rejected", None)
    assert "no valid system serial" in (starts[2].error or "")
    assert told[1:] == [("hivenet.steps", new, "started", 1),
                        ("hivenet.steps", done, "replayed", 1),
                        ("hivenet.steps", "bad", "rejected", None)]
    repo.finish_many([s.finished(True, {"paid": 2}) for s in starts if s.started])
    assert repo.begin_many([new], [{"n": 2}]) == [KeyStart(new, "replayed", 1, {"paid": 2})]
    any_conn.commit()
    assert scalar(db, "SELECT unified_serial FROM hivenet.step_attempt "
                      "WHERE system_serial = %s", (new,)) == unified
    with pytest.raises(InvalidInput, match="has 1 system serials but 2 requests"):
        repo.begin_many([new], [None, None])
    any_conn.rollback()


def test_the_async_step_repository_begins_and_finishes_a_batch(
        hivenet_app_url: str, async_kind: str, db: psycopg.Connection) -> None:
    serials = [new_serial(db), new_serial(db)]

    async def scenario() -> list[Any]:
        async with async_connection(async_kind, hivenet_app_url) as conn:
            repo = AsyncStepRepository(conn)
            starts = await repo.begin_many(serials, [{"n": 1}, {"n": 2}])
            await repo.finish_many([s.finished(False, {"error": "x"}) for s in starts])
            await conn.commit()
            again = await repo.begin_many(serials, [{"n": 1}, {"n": 2}])
            await conn.rollback()
            return [s.outcome for s in starts] + [(s.outcome, s.attempt) for s in again]

    assert asyncio.run(scenario()) == ["started", "started", ("started", 2), ("started", 2)]


def test_the_bench_case_runs_quick(hivenet_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Both sides of ``requests_batch_100`` begin and finish their 100 keys (a repeat of a
    side's transaction replays every key), and the case runs quick."""
    from hivenet_db import bench
    from hivenet_db.bench import cases

    with psycopg.connect(hivenet_url, autocommit=True) as conn:
        for call in (cases._one_by_one, cases._batched):
            prefix = f"bench-{call.__name__}"
            call(conn, prefix, {"n": 1}, {"ok": True})
            rows = conn.execute(
                "SELECT count(*) FILTER (WHERE state = 'success'), count(*) "
                "FROM hivenet.request_attempt WHERE namespace = %s AND key LIKE %s",
                (cases.BATCH_NAMESPACE, f"{prefix}-%")).fetchone()
            assert rows == (cases.BATCH_KEYS, cases.BATCH_KEYS)
            starts = RequestRepository(conn).begin_many(
                cases.BATCH_NAMESPACE, cases._batch_keys(prefix),
                [{"n": 1}] * cases.BATCH_KEYS)
            assert {s.outcome for s in starts} == {"replayed"}
    code = bench.main(["--url", hivenet_url, "--quick", "--seconds", "1", "--rounds", "1",
                       "--json", "--scenario", "requests_batch_100"])
    out = capsys.readouterr()
    assert code == 0, out.err
    [result] = json.loads(out.out)
    assert (result["scenario"], result["unit"], result["clients"]) == (
        "requests_batch_100", "keys/s", cases.BATCH_THREADS)
    assert result["baseline_median"] > 0 and result["candidate_median"] > 0
