"""The policy of a namespace of keyed requests (set_namespace_policy): fingerprints ('bytes',
'json' by RFC 8785, JSON paths) and key rules, on every path of begin_request, against real
PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

from hivenet_db import InvalidInput, RequestRepository
from hivenet_db._execute import SyncDB
from tests.helpers import (
    failure,
    functions_run,
    policy,
    policy_call,
    race,
    role_in,
    scalar,
)

Connect = Callable[..., psycopg.Connection]


def key() -> str:
    return str(uuid.uuid4())


def namespace() -> str:
    return f"ns-{uuid.uuid4().hex[:12]}"


def stored(db: psycopg.Connection, name: str) -> Any:
    return db.execute("SELECT retention::text, fingerprint, key_min_length, key_pattern "
                      "FROM hivenet.request_namespace WHERE namespace = %s", (name,)).fetchone()


def begin(conn: psycopg.Connection, name: str, request_key: str, request: Any,
          **options: Any) -> tuple[str, int, Any]:
    named = "".join(f", {option} => %({option})s" for option in options)
    row = conn.execute(f"SELECT * FROM hivenet.begin_request(%(ns)s, %(key)s, %(request)s"
                       f"{named})", {"ns": name, "key": request_key,
                                     "request": Jsonb(request), **options}).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def begin_json(conn: psycopg.Connection, name: str, request_key: str,
               request_text: str) -> tuple[str, int, Any]:
    """begin_request with the request exactly as written (jsonb keeps the form of numbers)."""
    row = conn.execute("SELECT * FROM hivenet.begin_request(%s, %s, %s::jsonb)",
                       (name, request_key, request_text)).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def finish(conn: psycopg.Connection, name: str, request_key: str, attempt: int,
           response: Any = None) -> None:
    conn.execute("SELECT hivenet.finish_request(%s, %s, %s, true, %s)",
                 (name, request_key, attempt, Jsonb(response)))


def canonical(db: psycopg.Connection, value: str) -> str:
    return str(scalar(db, "SELECT hivenet._canonical_json(%s::jsonb)", (value,)))


# RFC 8785 appendix B: IEEE 754 doubles and how JCS writes them (the NaN and the infinities,
# which JSON cannot hold, left out).
RFC_8785_NUMBERS = [
    ("0000000000000000", "0"), ("8000000000000000", "0"),
    ("0000000000000001", "5e-324"), ("8000000000000001", "-5e-324"),
    ("7fefffffffffffff", "1.7976931348623157e+308"),
    ("ffefffffffffffff", "-1.7976931348623157e+308"),
    ("4340000000000000", "9007199254740992"), ("c340000000000000", "-9007199254740992"),
    ("4430000000000000", "295147905179352830000"),
    ("44b52d02c7e14af5", "9.999999999999997e+22"), ("44b52d02c7e14af6", "1e+23"),
    ("44b52d02c7e14af7", "1.0000000000000001e+23"),
    ("444b1ae4d6e2ef4e", "999999999999999700000"),
    ("444b1ae4d6e2ef4f", "999999999999999900000"), ("444b1ae4d6e2ef50", "1e+21"),
    ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"), ("3eb0c6f7a0b5ed8d", "0.000001"),
    ("41b3de4355555553", "333333333.3333332"), ("41b3de4355555554", "333333333.33333325"),
    ("41b3de4355555555", "333333333.3333333"), ("41b3de4355555556", "333333333.3333334"),
    ("41b3de4355555557", "333333333.33333343"),
    ("becbf647612f3696", "-0.0000033333333333333333"),
    ("43143ff3c1cb0959", "1424953923781206.2"),
]


@pytest.mark.parametrize(("bits", "expected"), RFC_8785_NUMBERS)
def test_numbers_are_written_as_rfc_8785_writes_them(db: psycopg.Connection, bits: str,
                                                     expected: str) -> None:
    """The double given by its bits, written by Python (shortest repr) as the input: JCS's
    text comes out; so does it from JCS's own text (a fixed point), whatever
    extra_float_digits the session has."""
    double = struct.unpack(">d", bytes.fromhex(bits))[0]
    db.execute("SET extra_float_digits = -3")
    assert canonical(db, repr(double)) == expected
    assert canonical(db, expected) == expected


def test_rfc_8785_examples(db: psycopg.Connection) -> None:
    """RFC 8785 §3.2.2 (the whole example) and §3.2.3 (members sorted by UTF-16 units: an
    emoji, above U+FFFF, before U+FB33)."""
    given = ('{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],'
             r' "string": "\u20ac$\u000F\u000aA' "'" r'\u0042\u0022\u005c\\\"\/",'
             ' "literals": [null, true, false]}')
    assert canonical(db, given) == (
        '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
        r'"string":"€$\u000f\nA' "'" r'B\"\\\\\"/"}')
    sorting = (r'{"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\ud83d\ude00": 5, "\u0080": 6,'
               r' "\u00f6": 7}')
    assert [int(v) for v in json.loads(canonical(db, sorting)).values()] == [2, 4, 6, 7, 1, 5, 3]
    assert canonical(db, "[]") == "[]" and canonical(db, "{}") == "{}"
    assert canonical(db, '{"": {"b": [1.50, {}], "a": "x"}}') == '{"":{"a":"x","b":[1.5,{}]}}'


def test_a_number_no_double_holds_is_refused(db: psycopg.Connection) -> None:
    code, message = failure(db, "SELECT hivenet._canonical_json('[1e400]')")
    assert code == "HN001" and "1" in message and "IEEE 754" in message


def test_the_policy_is_checked_and_null_leaves_a_value_as_it_is(db: psycopg.Connection) -> None:
    name = namespace()
    policy(db, name, retention="2 days")
    policy(db, name, fingerprint="json", key_min_length=32)
    assert stored(db, name) == ("2 days", "json", 32, None)
    policy(db, name, key_pattern="^[0-9a-f]{64}$")
    db.execute("SELECT hivenet.set_request_retention(%s, NULL)", (name,))  # the shorthand
    assert stored(db, name) == (None, "json", 32, "^[0-9a-f]{64}$")
    db.execute("SELECT hivenet.set_request_retention(%s, '3 days')", (name,))
    assert stored(db, name) == ("3 days", "json", 32, "^[0-9a-f]{64}$")
    policy(db, name, fingerprint="bytes", key_min_length=1, key_pattern="")  # the defaults
    assert stored(db, name) == ("3 days", None, None, None)
    db.execute("SELECT hivenet.set_request_retention(%s, NULL)", (name,))
    assert stored(db, name) is None  # every default: no row
    cases: list[tuple[dict[str, Any], str]] = [
        ({"on_failure": "finally"}, "on_failure 'finally' of namespace"),
        ({"expire_after": "-1 hour"}, "-01:00:00 is not between 0"),
        ({"expire_after": "11 years"}, "11 years is not between 0"),
        ({"fingerprint": "sha1"}, "fingerprint 'sha1' is neither"),
        ({"fingerprint": "[]"}, "fingerprint '[]' is neither"),
        ({"fingerprint": '["$.a", "$$"]'}, "path '\"$$\"' is not a JSON path"),
        ({"fingerprint": '["$.a", 1]'}, "path '1' is not a JSON path"),
        ({"key_min_length": 0}, "key_min_length 0 of namespace"),
        ({"key_min_length": 256}, "key_min_length 256 of namespace"),
        ({"key_pattern": "(["}, "key_pattern '([' of namespace"),
        ({"retention": "0 days"}, "retention"),
    ]
    for values, words in cases:
        code, message = failure(db, *policy_call(name, **values))
        assert (code, words in message) == ("HN001", True), message
    code, message = failure(db, "SELECT hivenet.set_namespace_policy('hivenet.other', "
                                "fingerprint => 'json')")
    assert code == "HN001" and "reserved" in message
    assert stored(db, name) is None


@pytest.fixture
def app(db: psycopg.Connection) -> Any:
    """db acting as a login granted only hivenet_app."""
    with role_in(db, "policy_test_app", "hivenet_app") as conn:
        yield conn


def _begin_everywhere(db: psycopg.Connection, conn: psycopg.Connection, name: str,
                      first: str, same: str, other: str) -> None:
    """first starts a key (new key, as the application role), `same` is the same request
    under the namespace's policy: in progress (HN030) while it runs, replayed once it
    succeeded, also with nowait; `other` is refused (HN032) in both states."""
    request_key = key()
    assert begin_json(conn, name, request_key, first) == ("started", 1, None)
    for request in (same, other):
        code, _ = failure(conn, "SELECT * FROM hivenet.begin_request(%s, %s, %s::jsonb)",
                          (name, request_key, request))
        assert code == ("HN030" if request == same else "HN032")
    finish(conn, name, request_key, 1, {"status": 201})
    assert begin_json(conn, name, request_key, same) == ("replayed", 1, {"status": 201})
    row = conn.execute("SELECT * FROM hivenet.begin_request(%s, %s, %s::jsonb, nowait => true)",
                       (name, request_key, same)).fetchone()
    assert row == ("replayed", 1, {"status": 201})
    code, message = failure(conn, "SELECT * FROM hivenet.begin_request(%s, %s, %s::jsonb)",
                            (name, request_key, other))
    assert code == "HN032", message
    db.execute("RESET ROLE")
    fingerprints = db.execute("SELECT fingerprint FROM hivenet.request_attempt "
                              "WHERE namespace = %s AND key = %s", (name, request_key)).fetchall()
    db.execute("SET ROLE policy_test_app")
    assert len(fingerprints) == 1


def test_bytes_by_default_the_form_of_a_number_matters(db: psycopg.Connection,
                                                       app: psycopg.Connection) -> None:
    """The default (and 'bytes'): jsonb text, so key order and whitespace do not matter and
    1.0 is not 1."""
    name = namespace()
    _begin_everywhere(db, app, name, '{"amount": 1, "currency": "EUR"}',
                      '{"currency":"EUR",  "amount":1}', '{"amount": 1.0, "currency": "EUR"}')


def test_json_the_form_of_a_number_does_not_matter(db: psycopg.Connection,
                                                   app: psycopg.Connection) -> None:
    name = namespace()
    db.execute("RESET ROLE")
    policy(db, name, fingerprint="json")
    db.execute("SET ROLE policy_test_app")
    _begin_everywhere(db, app, name, '{"amount": 1.0, "currency": "EUR", "items": [10, 2e1]}',
                      '{"items":[1e1, 20.000],"currency":"EUR","amount":1}',
                      '{"amount": 1.5, "currency": "EUR", "items": [10, 20]}')
    db.execute("RESET ROLE")
    request_key = key()
    begin_json(db, name, request_key, '{"b": 1E2, "a": [true]}')
    assert scalar(db, "SELECT fingerprint FROM hivenet.request_attempt WHERE namespace = %s "
                      "AND key = %s", (name, request_key)) == hashlib.sha256(
        b'{"a":[true],"b":100}').digest()


def test_json_paths_the_rest_may_differ(db: psycopg.Connection, app: psycopg.Connection) -> None:
    name = namespace()
    db.execute("RESET ROLE")
    policy(db, name, fingerprint='["$.amount", "$.currency"]')
    db.execute("SET ROLE policy_test_app")
    _begin_everywhere(db, app, name, '{"amount": 10, "currency": "EUR", "note": "first"}',
                      '{"note": "again", "currency": "EUR", "amount": 10.0, "at": 2}',
                      '{"amount": 10, "currency": "USD", "note": "first"}')
    db.execute("RESET ROLE")
    request_key = key()
    begin_json(db, name, request_key, '{"amount": 5, "note": "x"}')  # no currency: []
    assert scalar(db, "SELECT fingerprint FROM hivenet.request_attempt WHERE namespace = %s "
                      "AND key = %s", (name, request_key)) == hashlib.sha256(
        b'{"paths":["$.amount","$.currency"],"values":[[5],[]]}').digest()
    code, _ = failure(db, "SELECT * FROM hivenet.begin_request(%s, %s, "
                          "'{\"amount\": 5, \"currency\": null}')", (name, request_key))
    assert code == "HN032"  # a null member is not a missing one


def test_a_default_policy_keeps_the_fast_path(db: psycopg.Connection) -> None:
    """Retention and key rules change nothing of begin_request's paths for a new key the rules
    allow (the fast path tests them, _key_allowed); a fingerprint policy sends new keys to the
    full path, which computes the namespace's fingerprint (_starts_apart)."""
    plain, kept, ruled, printed = namespace(), namespace(), namespace(), namespace()
    policy(db, kept, retention="2 days")
    policy(db, ruled, key_min_length=8)
    policy(db, printed, fingerprint="json")
    for name in (plain, kept, ruled, printed):  # each namespace's counters (decisions.sql)
        begin(db, name, key(), {"n": 1})
    fast = {"_start_key": 1}
    for name, run in [(plain, fast), (kept, fast), (ruled, fast),
                      (printed, {**fast, "_begin_key": 1, "_begin_attempt": 1,
                                 "_start_attempt": 1, "_policy_fingerprint": 1})]:
        def new_key(name: str = name) -> object:
            return begin(db, name, key(), {"n": 1})
        assert functions_run(db, new_key) == {**run, "_count_decision": 1}


def test_key_rules_refuse_a_key_on_every_path(db: psycopg.Connection,
                                              app: psycopg.Connection) -> None:
    name = namespace()
    db.execute("RESET ROLE")
    old_key = "short-but-begun"
    begin(db, name, old_key, {})
    policy(db, name, key_min_length=32, key_pattern="^[0-9a-f-]+$")
    db.execute("SET ROLE policy_test_app")
    for request_key, words in [
        ("abc", "key 'abc' is shorter than key_min_length 32 of namespace"),
        ("x" * 40, f"key '{'x' * 40}' does not match key_pattern '^[0-9a-f-]+$' of namespace"),
        (old_key, "key 'short-but-begun' is shorter than key_min_length 32"),
    ]:
        for nowait in (False, True):
            code, message = failure(
                app, "SELECT * FROM hivenet.begin_request(%s, %s, '{}', nowait => %s)",
                (name, request_key, nowait))
            assert code == "HN001" and words in message and name in message, message
    assert begin(app, name, key(), {})[0] == "started"


def test_two_clients_with_the_same_json_differently_written(connect: Connect,
                                                            db: psycopg.Connection) -> None:
    """Under 'json', two clients send the same key at once with the same JSON written
    differently: one runs it, the other waits for it and replays its response."""
    name, request_key = namespace(), key()
    policy(db, name, fingerprint="json")
    bodies = ['{"amount": 1.0, "currency": "EUR"}', '{ "currency" : "EUR", "amount" : 1e0 }']
    conns = [connect(autocommit=False) for _ in bodies]

    def client(i: int, conn: psycopg.Connection) -> str:
        outcome, attempt, _ = begin_json(conn, name, request_key, bodies[i])
        if outcome == "started":
            time.sleep(0.3)  # the effect, while the other waits on the key
            finish(conn, name, request_key, attempt, {"client": i})
        conn.commit()
        return outcome

    results = race(conns, client)
    assert sorted(str(r) for r in results) == ["replayed", "started"], results
    winner = results.index("started")
    rows = db.execute("SELECT attempt, state::text, response FROM hivenet.request_attempt "
                      "WHERE namespace = %s AND key = %s", (name, request_key)).fetchall()
    assert rows == [(1, "success", {"client": winner})]


def test_a_strict_path_that_finds_nothing_selects_nothing(db: psycopg.Connection) -> None:
    name = namespace()
    policy(db, name, fingerprint='["strict $.amount"]')
    request_key = key()
    assert begin(db, name, request_key, {"note": "no amount"})[0] == "started"
    code, _ = failure(db, "SELECT * FROM hivenet.begin_request(%s, %s, '{\"note\": \"other\"}')",
                      (name, request_key))
    assert code == "HN030"  # the same request (nothing selected), still processing


def test_the_repository_follows_the_namespace_policy(any_conn: SyncDB,
                                                     db: psycopg.Connection) -> None:
    """RequestRepository needs nothing of its own: the namespace's policy applies to what it
    sends (a Python 1.0 and 1 are one number under 'json'; a short key is InvalidInput)."""
    name, request_key = namespace(), key()
    policy(db, name, fingerprint="json", key_min_length=36)
    requests = RequestRepository(any_conn)
    start = requests.begin(name, request_key, {"amount": 1, "currency": "EUR"})
    requests.finish(name, request_key, start.attempt, True, {"ok": True})
    any_conn.commit()
    again = requests.begin(name, request_key, {"currency": "EUR", "amount": 1.0})
    assert again.replayed and again.response == {"ok": True}
    with pytest.raises(InvalidInput, match="key_min_length 36"):
        requests.begin(name, "short", {})
    any_conn.rollback()


def test_a_key_begun_before_a_change_of_policy_still_matches_the_very_same_request(
        db: psycopg.Connection) -> None:
    """The default fingerprint is the finest: a key begun under it matches the very same
    request (jsonb-equal) after the namespace took another policy; a request the new policy
    alone calls the same is refused, its old fingerprint being the default one."""
    name, request_key = namespace(), key()
    finish(db, name, request_key, begin_json(db, name, request_key, '{"a": 1}')[1], {"ok": 1})
    policy(db, name, fingerprint="json")
    assert begin_json(db, name, request_key, '{ "a" : 1 }') == ("replayed", 1, {"ok": 1})
    code, _ = failure(db, "SELECT * FROM hivenet.begin_request(%s, %s, '{\"a\": 1.0}')",
                      (name, request_key))
    assert code == "HN032"


def begin_step(conn: psycopg.Connection, serial: str, request_text: str) -> tuple[Any, ...]:
    row = conn.execute("SELECT * FROM hivenet.begin_step(%s, %s::jsonb)",
                       (serial, request_text)).fetchone()
    assert row is not None
    return tuple(row)


def test_the_steps_fingerprint_policy_decides_their_replays(db: psycopg.Connection,
                                                            app: psycopg.Connection) -> None:
    """Steps under 'json' and under JSON paths (the policy of namespace hivenet.steps), as the
    application role: begin_step's inlined replay compares the default fingerprint only, so
    a form the policy calls the same replays through the full path, and a request the policy
    calls another is refused; also [[5]], whose jsonb text is the canonical text of what the
    paths select of the first request (so no policy's fingerprint may be a hash of that
    text alone)."""
    db.execute("RESET ROLE")
    serial, other = (str(scalar(db, "SELECT hivenet.next_system_serial('C0001', 'A01', '01')"))
                     for _ in range(2))
    policy(db, "hivenet.steps", fingerprint="json")
    db.execute("SET ROLE policy_test_app")
    assert begin_step(app, serial, '{"amount": 1.0}')[:2] == ("started", 1)
    app.execute("SELECT hivenet.finish_step(%s, 1, true, '{\"paid\": 1}')", (serial,))
    assert begin_step(app, serial, '{"amount": 1e0}') == ("replayed", 1, {"paid": 1})
    code, _ = failure(app, "SELECT * FROM hivenet.begin_step(%s, '{\"amount\": 2}')", (serial,))
    assert code == "HN032"
    db.execute("RESET ROLE")
    policy(db, "hivenet.steps", fingerprint='["$.amount"]')
    db.execute("SET ROLE policy_test_app")
    assert begin_step(app, other, '{"amount": 5, "note": "a"}')[:2] == ("started", 1)
    app.execute("SELECT hivenet.finish_step(%s, 1, true, '{\"paid\": 5}')", (other,))
    assert begin_step(app, other, '{"note": "b", "amount": 5}') == ("replayed", 1, {"paid": 5})
    for another in ('[[5]]', '{"amount": 6, "note": "a"}'):
        code, _ = failure(app, "SELECT * FROM hivenet.begin_step(%s, %s::jsonb)",
                          (other, another))
        assert code == "HN032", another
