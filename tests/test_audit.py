"""Audit with the caller: every attempt (keyed requests and steps, on every insert path)
records who began it, view request_attempts shows it without payloads to the reporting role,
and a namespace's optional hash chain finds a changed or deleted attempt (verify_audit_chain,
`hivenet-db audit verify`), stays verifiable after retention and under concurrent begins."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.command import in_process
from tests.helpers import failure, race, role_in, scalar

Connect = Callable[..., psycopg.Connection]
VIEW_COLUMNS = ["namespace", "key", "attempt", "state", "started_at", "finished_at",
                "called_by", "application_name", "client_addr", "resolved_by", "note"]


def key() -> str:
    return str(uuid.uuid4())


def namespace() -> str:
    return f"audit-{uuid.uuid4().hex[:12]}"


def begin(conn: psycopg.Connection, name: str, request_key: str,
          request: Any = None) -> tuple[str, int]:
    row = conn.execute("SELECT outcome, attempt FROM hivenet.begin_request(%s, %s, %s)",
                       (name, request_key, Jsonb(request))).fetchone()
    assert row is not None
    return row[0], row[1]


def finish(conn: psycopg.Connection, name: str, request_key: str, attempt: int,
           succeeded: bool, response: Any = None) -> None:
    conn.execute("SELECT hivenet.finish_request(%s, %s, %s, %s, %s)",
                 (name, request_key, attempt, succeeded, Jsonb(response)))


def callers(db: psycopg.Connection, name: str) -> list[tuple[Any, ...]]:
    """(key, attempt, called_by, application_name, client_addr) of each attempt of a
    namespace, from the reporting view."""
    return db.execute("SELECT key, attempt, called_by, application_name, host(client_addr) "
                      "FROM hivenet.request_attempts WHERE namespace = %s "
                      "ORDER BY started_at, key, attempt", (name,)).fetchall()


def chained(db: psycopg.Connection) -> str:
    name = namespace()
    db.execute("SELECT hivenet.set_namespace_policy(%s, audit_chain => true)", (name,))
    return name


def verify(db: psycopg.Connection, name: str) -> dict[str, Any]:
    cursor = db.execute("SELECT * FROM hivenet.verify_audit_chain(%s)", (name,))
    row = cursor.fetchone()
    assert row is not None and cursor.description is not None
    return dict(zip([column.name for column in cursor.description], row, strict=True))


def system_serial(db: psycopg.Connection) -> str:
    return str(scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')"))


# --- who called ------------------------------------------------------------------------------

def test_every_insert_path_records_the_application_login(
        db: psycopg.Connection, hivenet_app_url: str) -> None:
    """The application's login, its application_name and address, on the fast path of a new
    key and of a new step (_start_key) and on the state machine's (_begin_attempt): both
    SECURITY DEFINER, where current_user is the owner, so the columns' defaults read the
    session: a retry after a failure, a namespace with a policy, a chained namespace."""
    login = psycopg.conninfo.conninfo_to_dict(hivenet_app_url)["user"]
    ruled, chain = namespace(), chained(db)
    db.execute("SELECT hivenet.set_namespace_policy(%s, key_min_length => 8)", (ruled,))
    plain, retried, serial = key(), key(), system_serial(db)
    with psycopg.connect(hivenet_app_url, autocommit=True,
                         application_name="billing-worker") as app:
        assert begin(app, "audit", plain) == ("started", 1)
        finish(app, "audit", retried, begin(app, "audit", retried)[1], False)
        assert begin(app, "audit", retried) == ("started", 2)
        assert begin(app, ruled, key()) == ("started", 1)
        assert begin(app, chain, key()) == ("started", 1)
        assert scalar(app, "SELECT outcome FROM hivenet.begin_step(%s)", (serial,)) == "started"
    rows = callers(db, "audit") + callers(db, ruled) + callers(db, chain)
    rows += callers(db, "hivenet.steps")
    assert len(rows) == 6
    assert {row[2:] for row in rows} == {(login, "billing-worker", "127.0.0.1")}
    assert login != "postgres"


def test_the_role_set_in_the_session_is_the_caller(db: psycopg.Connection) -> None:
    """SET ROLE (a pooler's or PostgREST's per-request role): called_by is that role on the
    fast path and inside SECURITY DEFINER code alike, not the login (session_user); an
    empty application_name is NULL."""
    db.execute("SET application_name = ''")
    chain, again = chained(db), key()
    with role_in(db, "audit_clerk_test", "hivenet_app") as clerk:
        begin(clerk, "audit", again)
        finish(clerk, "audit", again, 1, False)
        begin(clerk, "audit", again)
        begin(clerk, chain, key())
    assert scalar(db, "SELECT session_user") == "postgres"
    rows = callers(db, "audit") + callers(db, chain)
    assert [row[2:4] for row in rows] == [("audit_clerk_test", None)] * 3


def test_the_reporting_role_reads_the_attempts_without_payloads(
        db: psycopg.Connection) -> None:
    serial, request_key = system_serial(db), key()
    db.execute("SET application_name = 'checkout'")
    db.execute("SELECT * FROM hivenet.begin_step(%s, %s)", (serial, Jsonb({"amount": 5})))
    begin(db, "shop", request_key, {"card": "4111"})
    finish(db, "shop", request_key, 1, True, {"secret": "receipt"})
    db.execute("SELECT hivenet.resolve_step(%s, 1, false, 'no answer from the bank')", (serial,))
    with role_in(db, "audit_reader_test", "hivenet_reporting") as reader:
        cursor = reader.execute("SELECT * FROM hivenet.request_attempts "
                                "WHERE key IN (%s, %s) ORDER BY namespace", (serial, request_key))
        rows = cursor.fetchall()
        assert cursor.description is not None
        assert [column.name for column in cursor.description] == VIEW_COLUMNS
        assert failure(reader, "SELECT * FROM hivenet.request_attempt")[0] == "42501"
        assert failure(reader, "SELECT * FROM hivenet.verify_audit_chain('shop')")[0] == "42501"
    step, request = (dict(zip(VIEW_COLUMNS, row, strict=True)) for row in rows)
    assert (step["namespace"], step["state"], step["resolved_by"], step["note"]) == (
        "hivenet.steps", "failed", "postgres", "no answer from the bank")
    assert (request["state"], request["called_by"], request["application_name"]) == (
        "success", "postgres", "checkout")
    assert "receipt" not in repr(rows) and "4111" not in repr(rows)


def test_a_batch_records_the_caller_and_links_each_key_of_a_chained_namespace(
        db: psycopg.Connection, hivenet_app_url: str) -> None:
    """begin_requests writes its new keys in one INSERT of its own: the caller columns there
    too, and in a chained namespace every key's begin is a link (the keys go one by one)."""
    login = psycopg.conninfo.conninfo_to_dict(hivenet_app_url)["user"]
    chain, keys = chained(db), [key(), key(), key()]
    with psycopg.connect(hivenet_app_url, autocommit=True,
                         application_name="batch-worker") as app:
        for name in ("audit", chain):
            outcomes = app.execute(
                "SELECT outcome FROM hivenet.begin_requests(%s, %s::text[], %s::jsonb[])",
                (name, keys, [Jsonb(None)] * len(keys))).fetchall()
            assert outcomes == [("started",)] * len(keys)
    rows = [row for row in callers(db, "audit") if row[0] in keys] + callers(db, chain)
    assert len(rows) == 2 * len(keys)
    assert {row[2:] for row in rows} == {(login, "batch-worker", "127.0.0.1")}
    result = verify(db, chain)
    assert result["problem"] is None, result
    assert (result["attempts"], result["links"]) == (len(keys), len(keys))


# --- the hash chain --------------------------------------------------------------------------

def test_a_chain_of_begins_finishes_retries_and_resolutions_is_intact(
        db: psycopg.Connection) -> None:
    name, first, second, stuck = chained(db), key(), key(), key()
    finish(db, name, first, begin(db, name, first, {"a": 1})[1], False, {"declined": True})
    finish(db, name, first, begin(db, name, first, {"a": 1})[1], True, {"paid": 1})
    assert begin(db, name, first, {"a": 1}) == ("replayed", 2)  # no link: nothing written
    begin(db, name, second)
    begin(db, name, stuck)
    db.execute("SELECT hivenet.resolve_request(%s, %s, 1, true, 'settled by phone')",
               (name, stuck))
    result = verify(db, name)
    assert result["problem"] is None, result
    assert (result["attempts"], result["links"]) == (4, 7)
    assert result["head"] == scalar(db, "SELECT head FROM hivenet.request_chain "
                                        "WHERE namespace = %s", (name,))
    # Other namespaces are outside any chain, and need no row of the chain to begin.
    begin(db, "plain", key())
    assert scalar(db, "SELECT count(*) FROM hivenet.request_attempt WHERE namespace = 'plain' "
                      "AND chain_position IS NULL") == 1
    assert failure(db, "SELECT * FROM hivenet.verify_audit_chain('plain')")[0] == "HN001"


def test_the_steps_have_a_chain_when_their_policy_says_so(db: psycopg.Connection,
                                                       hivenet_admin_url: str) -> None:
    """The steps' namespace takes audit_chain as any namespace: a new step (its fast path
    leaves a chained namespace to the full path, which links it), a failed one and its retry,
    a batch of steps, and their ends are links of one intact chain, as the command says."""
    db.execute("SELECT hivenet.set_namespace_policy('hivenet.steps', audit_chain => true)")
    first, second, third = (system_serial(db) for _ in range(3))
    db.execute("SELECT * FROM hivenet.begin_step(%s)", (first,))
    db.execute("SELECT hivenet.finish_step(%s, 1, false)", (first,))
    db.execute("SELECT * FROM hivenet.begin_step(%s)", (first,))
    db.execute("SELECT hivenet.finish_step(%s, 2, true)", (first,))
    db.execute("SELECT * FROM hivenet.begin_steps(ARRAY[%s, %s], ARRAY[NULL, NULL]::jsonb[])",
               (second, third))
    result = verify(db, "hivenet.steps")
    assert result["problem"] is None, result
    assert (result["attempts"], result["links"]) == (4, 6)
    out = hivenet_db(hivenet_admin_url, "audit", "verify", "hivenet.steps", rc=0).stdout
    assert out.startswith("chain of 4 attempts intact (6 links since the anchor)"), out


def test_a_chain_turned_off_stays_verifiable_and_goes_on_when_turned_on_again(
        db: psycopg.Connection) -> None:
    name, first, unchained, second = chained(db), key(), key(), key()
    begin(db, name, first)
    db.execute("SELECT hivenet.set_namespace_policy(%s, audit_chain => false)", (name,))
    assert scalar(db, "SELECT count(*) FROM hivenet.request_namespace WHERE namespace = %s",
                  (name,)) == 0  # the default policy again: new keys take the fast path
    begin(db, name, unchained)
    finish(db, name, first, 1, True, {"ok": 1})  # begun in the chain: its end is linked
    assert verify(db, name)["problem"] is None
    db.execute("SELECT hivenet.set_namespace_policy(%s, audit_chain => true)", (name,))
    begin(db, name, second)
    rows: dict[str, int | None] = dict(db.execute(
        "SELECT key, chain_position FROM hivenet.request_attempt WHERE namespace = %s",
        (name,)).fetchall())
    assert rows == {first: 1, unchained: None, second: 3}
    result = verify(db, name)
    assert result["problem"] is None and (result["attempts"], result["links"]) == (2, 3)


def test_a_response_changed_by_the_owner_is_found(db: psycopg.Connection) -> None:
    name, paid, later = chained(db), key(), key()
    finish(db, name, paid, begin(db, name, paid)[1], True, {"amount": 100})
    finish(db, name, later, begin(db, name, later)[1], True, {"amount": 7})
    db.execute("UPDATE hivenet.request_attempt SET response = '{\"amount\": 1000}' "
               "WHERE namespace = %s AND key = %s", (name, paid))
    result = verify(db, name)
    assert (result["key"], result["attempt"], result["position"]) == (paid, 1, 2)
    assert "that row was changed" in result["problem"]


def test_a_caller_changed_by_the_owner_is_found(db: psycopg.Connection) -> None:
    name, request_key = chained(db), key()
    begin(db, name, request_key)
    db.execute("UPDATE hivenet.request_attempt SET called_by = 'someone_else' "
               "WHERE namespace = %s AND key = %s", (name, request_key))
    assert verify(db, name)["key"] == request_key


@pytest.mark.parametrize("which", ["middle", "latest"])
def test_a_deleted_attempt_is_found(db: psycopg.Connection, which: str) -> None:
    name = chained(db)
    keys = [key() for _ in range(3)]
    for request_key in keys:
        finish(db, name, request_key, begin(db, name, request_key)[1], True, {"ok": 1})
    gone = keys[1] if which == "middle" else keys[2]
    db.execute("DELETE FROM hivenet.request_attempt WHERE namespace = %s AND key = %s",
               (name, gone))
    result = verify(db, name)
    assert result["problem"] is not None and "missing" in result["problem"], result
    assert result["position"] == (3 if which == "middle" else 5)
    if which == "middle":
        assert result["key"] == keys[2]  # the first link after the gap


def test_retention_leaves_the_chain_verifiable(db: psycopg.Connection,
                                                fake_clock: Callable[..., None]) -> None:
    """maintain() removes a prefix of the chain and anchors the rest; a key past its
    retention linked after one still kept waits for it; tampering afterwards is found."""
    name = chained(db)
    db.execute("SELECT hivenet.set_request_retention(%s, '1 hour')", (name,))
    fake_clock(db, "2026-11-21 10:00:00+00")
    old = [key() for _ in range(3)]
    for request_key in old:
        finish(db, name, request_key, begin(db, name, request_key)[1], True, {"ok": 1})
    busy, after_busy = key(), key()
    begin(db, name, busy)  # processing: kept, and so is what is linked after it
    finish(db, name, after_busy, begin(db, name, after_busy)[1], True, {"ok": 2})
    fake_clock(db, "2026-11-21 12:00:00+00")
    db.execute("SELECT hivenet.maintain()")
    left = {row[0] for row in db.execute("SELECT key FROM hivenet.request_attempt "
                                         "WHERE namespace = %s", (name,))}
    assert left == {busy, after_busy}
    assert scalar(db, "SELECT anchor_position FROM hivenet.request_chain WHERE namespace = %s",
                  (name,)) == 6
    result = verify(db, name)
    assert result["problem"] is None and (result["attempts"], result["links"]) == (2, 3), result
    finish(db, name, busy, 1, True, {"ok": 3})
    fake_clock(db, "2026-11-21 14:00:00+00")
    db.execute("SELECT hivenet.maintain()")
    assert scalar(db, "SELECT count(*) FROM hivenet.request_attempt WHERE namespace = %s",
                  (name,)) == 0
    assert verify(db, name)["problem"] is None
    newer = key()
    finish(db, name, newer, begin(db, name, newer)[1], True, {"ok": 4})
    assert verify(db, name)["problem"] is None
    db.execute("UPDATE hivenet.request_attempt SET finished_at = finished_at - interval '1s' "
               "WHERE namespace = %s", (name,))
    assert verify(db, name)["key"] == newer


def test_concurrent_begins_and_finishes_keep_the_chain_intact(
        db: psycopg.Connection, connect: Connect) -> None:
    """Real parallel connections, each beginning and finishing its own keys (some the same
    key, one of them wins), in one transaction and in two: every link follows the one before
    it."""
    name, shared = chained(db), key()
    conns = [connect(autocommit=False) for _ in range(8)]

    def act(i: int, conn: psycopg.Connection) -> int:
        done = 0
        for round_ in range(15):
            request_key = shared if round_ == 7 else key()
            try:
                outcome, attempt = begin(conn, name, request_key)
                if round_ % 2:
                    conn.commit()
                if outcome == "started":
                    finish(conn, name, request_key, attempt, bool(i % 3), {"by": i})
                conn.commit()
                done += 1
            except psycopg.Error as error:  # only the shared key, in progress elsewhere
                conn.rollback()
                if error.diag.sqlstate != "HN030":
                    raise
        return done

    results = race(conns, act)
    assert all(isinstance(result, int) for result in results), results
    result = verify(db, name)
    assert result["problem"] is None, result
    attempts = scalar(db, "SELECT count(*) FROM hivenet.request_attempt WHERE namespace = %s",
                      (name,))
    assert result["attempts"] == attempts >= 8 * 14
    assert result["links"] == 2 * attempts


# --- the command -----------------------------------------------------------------------------

def hivenet_db(url: str, *args: str, rc: int) -> subprocess.CompletedProcess[str]:
    result = in_process(*args, "--url", url)
    assert result.returncode == rc, result.stderr
    return result


def test_the_command_says_intact_or_names_the_changed_attempt(
        db: psycopg.Connection, hivenet_admin_url: str) -> None:
    name, request_key = chained(db), key()
    finish(db, name, request_key, begin(db, name, request_key)[1], True, {"ok": 1})
    head = bytes(scalar(db, "SELECT head FROM hivenet.request_chain WHERE namespace = %s",
                        (name,))).hex()
    out = hivenet_db(hivenet_admin_url, "audit", "verify", name, rc=0).stdout
    assert out.strip() == f"chain of 1 attempts intact (2 links since the anchor), head {head}"
    db.execute("UPDATE hivenet.request_attempt SET note = 'edited' WHERE namespace = %s",
               (name,))
    out = hivenet_db(hivenet_admin_url, "audit", "verify", name, rc=3).stdout
    assert f"broken at link 2: link 2, the finish of key {request_key!r} attempt 1" in out
    assert "does not match" in out
    error = hivenet_db(hivenet_admin_url, "audit", "verify", "nothing-here", rc=1).stderr
    assert "HN001" in error and "no audit chain" in error
