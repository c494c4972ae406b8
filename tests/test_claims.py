"""Generic idempotency claims (SPEC §5): hivenet.claim, expiry, maintain, Python."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import random
import sys
import threading
import unicodedata
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy import Connection, Engine, text

from hivenet_db import AsyncClaimRepository, ClaimRepository, DuplicateClaim, InvalidInput
from hivenet_db._execute import SyncDB
from hivenet_db.parsing import shown
from tests.helpers import (
    async_connection,
    behind_a_table_lock,
    claim_and_end,
    race,
    scalar,
    statements_of,
    wait_until_blocked,
)

NOW = "2031-03-01 12:00:00+00"
SetClock = Callable[[psycopg.Connection, str], None]


def claim_state(conn: psycopg.Connection, namespace: str | None, key: str | None,
                nowait: bool = False) -> str | None:
    """None when the claim was taken, else the SQLSTATE raised."""
    try:
        conn.execute("SELECT hivenet.claim(%s, %s, %s)", (namespace, key, nowait))
    except psycopg.Error as error:
        return error.sqlstate
    return None


def taken(db: psycopg.Connection, namespace: str, key: str) -> int:
    return int(scalar(db, "SELECT count(*) FROM hivenet.claim_record WHERE namespace = %s "
                          "AND key = %s", (namespace, key)))


def test_claim_once(db: psycopg.Connection) -> None:
    assert claim_state(db, "inventory.purchase_input_finished", "PO-1") is None
    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT hivenet.claim('inventory.purchase_input_finished', 'PO-1')")
    assert raised.value.sqlstate == "HN040"
    assert "PO-1" in str(raised.value.diag.message_primary)
    # Keys are per namespace.
    assert claim_state(db, "queue.orders", "PO-1") is None
    assert claim_state(db, "inventory.purchase_input_finished", "PO-2") is None


@pytest.mark.parametrize(("namespace", "key"), [
    (None, "k"), ("", "k"), ("n" * 256, "k"), ("n", None), ("n", ""), ("n", "k" * 256),
    # The rule of keyed requests (issue 29 point 6): no control character, not the library's.
    ("orders\n", "k"), ("orders\x1b[2J", "k"), ("n", "k\u0085"), ("hivenet.x", "k"),
])
def test_invalid_claims(db: psycopg.Connection, namespace: str | None, key: str | None) -> None:
    assert claim_state(db, namespace, key) == "HN001"


def test_longest_key_is_accepted(db: psycopg.Connection) -> None:
    assert claim_state(db, "n" * 255, "k" * 255) is None
    assert claim_state(db, "🐝" * 255, "🐝" * 255) is None  # 1,020 bytes each fit the index


def test_messages_quote_control_characters(db: psycopg.Connection) -> None:
    """A raw newline or ESC sequence in a message would forge lines of the server log and of
    a terminal: every control character is shown escaped."""
    with pytest.raises(psycopg.Error) as caught:
        db.execute("SELECT hivenet.claim(%s, 'k')", ("a\nb\x1b[2J\x85",))
    message = caught.value.diag.message_primary or ""
    assert "'a\\x0ab\\x1b[2J\\x85'" in message, message
    assert not any(ord(c) < 32 or 0x7f <= ord(c) <= 0x9f for c in message)


# Right-to-left override, zero width space, line separator, paragraph separator, byte order
# mark, soft hyphen, a language tag, a bidirectional isolate (Unicode Cf, Zl, Zp).
INVISIBLE = ["\u202e", "\u200b", "\u2028", "\u2029", "\ufeff", "\u00ad", "\U000e0001",
             "\u2066"]


@pytest.mark.parametrize("character", INVISIBLE)
def test_invisible_characters_are_refused_and_shown_by_their_code(
        db: psycopg.Connection, character: str) -> None:
    """Raw, U+202E reorders what a message (HN040, HN030) or a log line says, U+2028 breaks
    it, and U+200B or U+FEFF make two keys look the same: refused in the namespaces and keys
    of claims and keyed requests (one rule), and shown by their code."""
    code = shown(character)[1:-1]  # \u202e
    assert code.startswith(("\\u", "\\U", "\\x"))
    calls = ["SELECT hivenet.claim(%s, %s)", "SELECT * FROM hivenet.begin_request(%s, %s)"]
    for call in calls:
        for namespace, key in ((f"orders{character}", "k"), ("orders", f"PO-1{character}")):
            with pytest.raises(psycopg.Error) as caught:
                db.execute(call, (namespace, key))
            assert caught.value.sqlstate == "HN001", call
            message = caught.value.diag.message_primary or ""
            assert "invisible character" in message and code in message, message
            assert character not in message


def test_every_control_and_invisible_character_is_refused_and_escaped_alike(
        db: psycopg.Connection) -> None:
    """Unicode's categories Cc, Cf, Zl and Zp (Python's unicodedata the oracle; NUL cannot
    be in text): no key may hold one, and every message shows each by its code, from SQL
    (_shown) as from Python (parsing.shown)."""
    unseen = [chr(c) for c in range(1, sys.maxunicode + 1)
              if unicodedata.category(chr(c)) in ("Cc", "Cf", "Zl", "Zp")]
    seen = ["a", "é", "漢", "🐝", "\u0301", "\u00a0", "\u3000", "'", "\\"]
    rows = db.execute("SELECT c, hivenet._name_valid('k' || c), hivenet._shown(c) "
                      "FROM unnest(%s::text[]) AS c", (unseen + seen,)).fetchall()
    for character, valid, escaped in rows:
        assert valid == (character in seen), hex(ord(character))
        assert escaped == shown(character), hex(ord(character))
        assert (character in escaped) == (character in seen)


def test_rolled_back_claim_is_free_again(db: psycopg.Connection) -> None:
    with db.transaction() as tx:
        assert claim_state(db, "queue.orders", "m-1") is None
        raise psycopg.Rollback(tx)
    assert taken(db, "queue.orders", "m-1") == 0
    assert claim_state(db, "queue.orders", "m-1") is None


def test_expiry(db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, NOW)
    db.execute("SELECT hivenet.set_claim_expiry('queue.orders', '1 hour')")
    assert claim_state(db, "queue.orders", "m-1") is None
    assert claim_state(db, "forever", "m-1") is None
    fake_clock(db, "2031-03-01 12:59:59+00")
    assert claim_state(db, "queue.orders", "m-1") == "HN040"
    fake_clock(db, "2031-03-01 13:00:00+00")
    # Expired: free again even before maintain() purged it, and taken anew for an hour.
    assert claim_state(db, "queue.orders", "m-1") is None
    assert claim_state(db, "queue.orders", "m-1") == "HN040"
    fake_clock(db, "2031-03-01 14:00:00+00")
    db.execute("SELECT hivenet.maintain()")
    assert taken(db, "queue.orders", "m-1") == 0
    assert taken(db, "forever", "m-1") == 1
    fake_clock(db, "2040-01-01 00:00:00+00")
    assert claim_state(db, "forever", "m-1") == "HN040"
    # Changing the expiry applies to claims taken afterwards; NULL: never again.
    db.execute("SELECT hivenet.set_claim_expiry('queue.orders', NULL)")
    assert claim_state(db, "queue.orders", "m-2") is None
    assert db.execute("SELECT expires_at FROM hivenet.claim_record WHERE key = 'm-2'"
                      ).fetchone()[0] is None


@pytest.mark.parametrize("expiry", ["0", "-1 hour"])
def test_expiry_must_be_positive(db: psycopg.Connection, expiry: str) -> None:
    with pytest.raises(psycopg.Error) as raised:
        db.execute("SELECT hivenet.set_claim_expiry('queue.orders', %s::interval)", (expiry,))
    assert raised.value.sqlstate == "HN001"


def test_expired_claim_taken_over_by_one_of_two(connect: Callable[..., psycopg.Connection],
                                                fake_clock: SetClock) -> None:
    conns = [connect() for _ in range(3)]
    for conn in conns:
        fake_clock(conn, NOW)
    conns[0].execute("SELECT hivenet.set_claim_expiry('q', '1 minute')")
    assert claim_state(conns[0], "q", "m") is None
    for conn in conns:
        fake_clock(conn, "2031-03-01 12:05:00+00")

    def attempt(_i: int, conn: psycopg.Connection) -> str | None:
        with conn.transaction():
            return claim_state(conn, "q", "m")

    outcomes = race(conns, attempt)
    assert sorted(outcomes, key=str) == sorted([None, "HN040", "HN040"], key=str)


@pytest.mark.parametrize(("winner_commits", "expected"), [(True, "HN040"), (False, None)])
def test_concurrent_claim_waits_for_the_winner(connect: Callable[..., psycopg.Connection],
                                               winner_commits: bool, expected: str | None
                                               ) -> None:
    winner, loser, observer = connect(), connect(), connect()
    out: dict[str, str | None] = {}
    with winner.transaction() as tx:
        assert claim_state(winner, "q", "m") is None
        thread = threading.Thread(target=lambda: out.update(state=claim_state(loser, "q", "m")))
        thread.start()
        wait_until_blocked(observer, loser.info.backend_pid)
        assert out == {}
        if not winner_commits:
            raise psycopg.Rollback(tx)
    thread.join(10)
    assert out == {"state": expected}
    assert taken(observer, "q", "m") == 1


def test_nowait_claim_fails_at_once(connect: Callable[..., psycopg.Connection]) -> None:
    winner, loser = connect(), connect()
    with winner.transaction() as tx:
        assert claim_state(winner, "q", "m") is None
        loser.execute("SET lock_timeout = '5s'")  # a wait would fail with 55P03, not HN040
        assert claim_state(loser, "q", "m", nowait=True) == "HN040"
        assert claim_state(loser, "q", "other", nowait=True) is None
        raise psycopg.Rollback(tx)
    assert claim_state(loser, "q", "m", nowait=True) is None
    assert scalar(loser, "SHOW lock_timeout") == "5s"  # the nowait timeout was its own


def test_a_nowait_claim_waits_for_a_lock_on_the_whole_table_and_is_no_false_duplicate(
        connect: Callable[..., psycopg.Connection]) -> None:
    holder, claimer = connect(), connect()
    assert behind_a_table_lock(holder, claimer, "hivenet.claim_record", lambda: claim_state(
        claimer, "q", "locked", nowait=True)) is None
    assert taken(holder, "q", "locked") == 1


def test_a_plain_claim_is_one_insert_through_its_key_and_takes_no_advisory_lock(
        db: psycopg.Connection) -> None:
    """Not timed (issue 13): a free claim runs one statement in the function, the insert,
    whose conflict check is the primary key's (its arbiter), and takes no advisory lock; the
    expiry of its namespace is read through that table's key."""
    db.execute("SELECT hivenet.set_claim_expiry('q', '1 hour')")
    for key in range(6):  # a session plans a statement for good after its fifth run
        assert claim_state(db, "q", f"warm-{key}") is None
    plans, advisory = statements_of(db, "SELECT hivenet.claim('q', 'm')")
    assert advisory == 0
    insert, caller = plans
    assert "Conflict Arbiter Indexes: claim_record_pkey" in insert
    assert "Seq Scan" not in insert
    assert "Index Scan using claim_namespace_pkey" in insert
    assert "hivenet.claim" in caller
    assert scalar(db, "SELECT expires_at - claimed_at FROM hivenet.claim_record "
                      "WHERE namespace = 'q' AND key = 'm'") == dt.timedelta(hours=1)


@pytest.mark.parametrize("nowait", [False, True])
def test_exactly_one_winner_over_many_trials(connect: Callable[..., psycopg.Connection],
                                             nowait: bool) -> None:
    conns = [connect() for _ in range(6)]
    rng = random.Random(5)
    for trial in range(40):
        key = f"m-{trial}"
        rolls_back = {i for i in range(len(conns)) if not nowait and rng.random() < 0.4}

        def attempt(i: int, conn: psycopg.Connection, key: str = key,
                    rolls_back: set[int] = rolls_back) -> str:
            return claim_and_end(conn, lambda: claim_state(conn, "q", key, nowait=nowait),
                                 i in rolls_back)

        outcomes = race(conns, attempt)
        assert set(outcomes) <= {"committed", "rolled back", "HN040"}, outcomes
        committed = outcomes.count("committed")
        assert taken(conns[0], "q", key) == committed
        assert committed == (1 if len(rolls_back) < len(conns) else 0), (outcomes, rolls_back)
        if nowait:
            assert outcomes.count("HN040") == len(conns) - 1


# --- Python ------------------------------------------------------------------------------

def test_python_claims(any_conn: SyncDB, db: psycopg.Connection) -> None:
    claims = ClaimRepository(any_conn)
    ClaimRepository(db).set_expiry("queue.orders", dt.timedelta(minutes=10))  # an admin's
    claims.claim("queue.orders", "m-1")
    with pytest.raises(DuplicateClaim) as raised:
        claims.claim("queue.orders", "m-1", nowait=True)
    assert raised.value.sqlstate == "HN040"
    any_conn.rollback()
    claims.claim("queue.orders", "m-1")
    any_conn.commit()
    with pytest.raises(InvalidInput):
        claims.claim("", "m-1")
    any_conn.rollback()
    assert scalar(db, "SELECT count(*) FROM hivenet.claim_record") == 1


def test_python_async_claims(hivenet_app_url: str, hivenet_admin_url: str,
                             async_kind: str) -> None:
    async def main() -> None:
        async with async_connection(async_kind, hivenet_admin_url) as admin:
            await AsyncClaimRepository(admin).set_expiry("q", None)  # an administrator's call
        async with async_connection(async_kind, hivenet_app_url) as conn:
            claims = AsyncClaimRepository(conn)
            await claims.claim("q", "m")
            with pytest.raises(DuplicateClaim):
                await claims.claim("q", "m")
    asyncio.run(main())


# --- the exactly-once consumer of docs/guides/dedup.md ------------------------------------------

@pytest.fixture
def shop(hivenet_engine: Engine) -> Iterator[Engine]:
    with hivenet_engine.begin() as conn:
        conn.execute(text("CREATE TABLE stock (sku text PRIMARY KEY, quantity int NOT NULL)"))
        conn.execute(text("INSERT INTO stock VALUES ('apple', 10)"))
    yield hivenet_engine


def handle(conn: Connection, message_id: str, body: str) -> None:
    """As in docs/guides/dedup.md: the claim and the effect commit together, or neither does."""
    order = json.loads(body)
    try:
        with conn.begin():
            ClaimRepository(conn).claim("queue.orders", message_id)
            conn.execute(text("UPDATE stock SET quantity = quantity - :n WHERE sku = :sku"),
                         {"n": order["quantity"], "sku": order["sku"]})
            if order.get("fail"):
                raise RuntimeError("crash between effect and acknowledgement")
    except DuplicateClaim:
        pass  # delivered before and processed: acknowledge, do nothing


def test_exactly_once_consumption_of_redelivered_messages(shop: Engine) -> None:
    with shop.connect() as conn:
        handle(conn, "m-1", '{"sku": "apple", "quantity": 3}')
        handle(conn, "m-1", '{"sku": "apple", "quantity": 3}')  # redelivered
        with pytest.raises(RuntimeError):
            handle(conn, "m-2", '{"sku": "apple", "quantity": 2, "fail": true}')
        handle(conn, "m-2", '{"sku": "apple", "quantity": 2}')  # redelivered after the crash
        handle(conn, "m-2", '{"sku": "apple", "quantity": 2}')
        assert conn.execute(text("SELECT quantity FROM stock")).scalar() == 5
