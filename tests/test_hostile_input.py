"""Hostile input (issue 10, part 4): every entry point the application role may call, and every
public method of the Python repositories, fed wrong lengths, NULLs, control characters,
non-ASCII, SQL fragments, megabyte strings and extreme counts. Only the documented SQLSTATEs
(SPEC §7, hivenet_db/errors.py) may come back, and a call that fails writes nothing: every
table of schema hivenet has the same checksum before and after.

The SQL entry points are read from the catalog (every function of schema hivenet that
hivenet_app may execute), so a new function is fed hostile input without a change here; a
function with an argument type this file has no strategy for fails the test."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import os
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from hivenet_db import (
    AsyncClaimRepository,
    AsyncInterfaceDedup,
    AsyncSerialRepository,
    AsyncStepRepository,
    ClaimRepository,
    HivenetError,
    InterfaceDedup,
    InvalidInput,
    RequestRepository,
    SerialRepository,
    StepRepository,
)
from hivenet_db.errors import BY_SQLSTATE
from tests.helpers import scalar
from tests.test_privileges import acting_as

DOCUMENTED = set(BY_SQLSTATE)
# Examples per test; a deeper run: HIVENET_HOSTILE_EXAMPLES=500 pytest tests/test_hostile_input.py
EXAMPLES = int(os.environ.get("HIVENET_HOSTILE_EXAMPLES", "40"))
MEGABYTE = 1_000_000
# One server-side limit per statement: a call that takes longer than this is a finding too.
STATEMENT_TIMEOUT = "20s"

# --- values ----------------------------------------------------------------------------------

# Valid pieces, so that hostile values also reach the checks after the first one.
VALID_TEXT = ["C0001", "A01", "01", "D0001", "unified", "system", "interface", "id_service",
              "inventory.purchase", "order-1", "replay", "reject",
              # names of relations, ours and the catalog's: an argument must not reach them
              "setting", "claim_record", "step_attempt", "cold_unified", "pg_authid",
              "hivenet.setting", "pg_catalog.pg_authid", "../setting"]
SQL_FRAGMENTS = ["'", "''", "\\", "%s", "%I", "%L", "$1", "$$", "'; DROP TABLE hivenet.setting; --",
                 "' OR '1'='1", "C0001'--", ") ; SELECT pg_sleep(10); --", "hivenet.now()",
                 "pg_temp.x", "\"quoted\"", "E'\\\\x00'", "/*", "*/", "NULL", "null", "[]", "{}"]
# PostgreSQL text cannot hold NUL: psycopg refuses it before sending (the Python test checks
# the repositories say so as InvalidInput); every other control character goes through.
CONTROL = "".join(chr(c) for c in range(1, 32)) + "\x7f\u0085\u2028\u202e\ufeff"
NON_ASCII = "éß漢字🐝\u0301Ωﬁ٣"  # accents, CJK, emoji, combining mark, fullwidth-ish, Arabic digit
ALPHABET = st.sampled_from(list(CONTROL + NON_ASCII + "C0A1 -_."))


def _serial_like(length: int) -> st.SearchStrategy[str]:
    """Strings of the length of a serial, made of digits and letters: pass the first checks."""
    return st.text(alphabet="0123456789ACDZ", min_size=length, max_size=length)


def huge(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(["x", "é", "'", "9", "🐝"])) * draw(
        st.sampled_from([MEGABYTE, MEGABYTE // 4 + 1]))


@st.composite
def texts(draw: st.DrawFn, *, nul: bool = False) -> str | None:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return None
    if kind == 1:
        return ""
    if kind == 2:
        return draw(st.sampled_from(VALID_TEXT))
    if kind == 3:
        return draw(st.sampled_from(SQL_FRAGMENTS))
    if kind == 4:
        return huge(draw)
    if kind == 5:
        return draw(st.sampled_from([28, 30, 39, 29, 31, 5, 3, 2, 4]).flatmap(_serial_like))
    alphabet = st.one_of(ALPHABET, st.just("\x00")) if nul else ALPHABET
    return draw(st.text(alphabet=alphabet, max_size=draw(st.sampled_from([3, 5, 40, 300]))))


def json_values(nul: bool = False) -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                       st.floats(allow_nan=False, allow_infinity=False), texts(nul=nul))
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(["system", "module", "instance", "target",
                                                   "merchant", "shard"]),
                                  st.text(ALPHABET, max_size=10)),
                        inner, max_size=5)), max_leaves=8)


@st.composite
def jsons(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 5))
    if kind == 0:
        return None
    if kind == 1:  # the fields of a format, each a hostile text
        names = draw(st.sampled_from([["system", "module", "instance"],
                                      ["system", "module", "instance", "target"],
                                      ["merchant", "shard"]]))
        return Jsonb({n: draw(texts().filter(lambda t: t is not None)) for n in names})
    if kind == 2:
        return Jsonb({"k": huge(draw)})
    # None inside Jsonb is JSON null, unlike a SQL NULL
    return Jsonb(draw(json_values()))


INT_EXTREMES = [None, -2**31, -1, 0, 1, 2, 10_000, 10_001, 1_000_000, 1_000_001, 2**31 - 1]
BIGINT_EXTREMES = [None, -2**63, -1, 0, 1, 99_999_999, 2**62, 2**63 - 1]
INTERVALS = [None, dt.timedelta(0), dt.timedelta(microseconds=1), dt.timedelta(seconds=-1),
             dt.timedelta(days=-3650), dt.timedelta(days=999_999_999), dt.timedelta(days=1),
             dt.timedelta(microseconds=-1)]
TIMESTAMPS = [None, dt.datetime.min, dt.datetime.max, dt.datetime(2026, 2, 29 - 1),
              dt.datetime(1970, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59)]
TIMESTAMPTZS = [None if t is None else t.replace(tzinfo=dt.UTC) for t in TIMESTAMPS]

STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "text": texts(),
    "jsonb": jsons(),
    "integer": st.sampled_from(INT_EXTREMES) | st.integers(-2**31, 2**31 - 1),
    "bigint": st.sampled_from(BIGINT_EXTREMES) | st.integers(-2**63, 2**63 - 1),
    "boolean": st.sampled_from([None, True, False]),
    "interval": st.sampled_from(INTERVALS),
    "timestamp without time zone": st.sampled_from(TIMESTAMPS),
    "timestamp with time zone": st.sampled_from(TIMESTAMPTZS),
    "bytea": st.none() | st.binary(max_size=64),  # a client's raw request: any bytes
}
# Arrays (a batch's keys, requests, attempts...): NULL, short lists of the element's values
# (a few keys drawn from three, so that some repeat), and one key past the batch limit.
STRATEGIES |= {
    f"{element}[]": st.one_of(st.none(), st.lists(STRATEGIES[element], max_size=5))
    for element in ("text", "jsonb", "integer", "boolean")}
STRATEGIES["text[]"] |= st.lists(st.sampled_from(["k1", "k2", None]), max_size=4) | st.just(
    [f"k{i}" for i in range(1001)])

# --- the database's state ----------------------------------------------------------------------


def checksums(db: psycopg.Connection) -> dict[str, str]:
    """Row count and checksum of every table of schema hivenet (partitions included): what a
    failed call must leave as it was. Sequences are left out: a number drawn by a call that
    failed is a gap, as documented (SPEC §6)."""
    tables = [row[0] for row in db.execute(
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = "
        "'hivenet'::regnamespace AND c.relkind = 'r' ORDER BY 1")]
    assert "hivenet.claim_record" in tables and "hivenet.request_attempt" in tables
    query = " UNION ALL ".join(
        f"SELECT '{t}', count(*) || ':' || coalesce(md5(string_agg(md5(r::text), '' "
        f"ORDER BY md5(r::text))), '') FROM {t} r" for t in tables)
    return dict(db.execute(query).fetchall())


def app_functions(db: psycopg.Connection) -> list[tuple[str, str, list[str]]]:
    """(signature, name, argument types) of every function of schema hivenet that hivenet_app
    may execute."""
    return [(sig, name, list(types)) for sig, name, types in db.execute("""
        SELECT p.oid::regprocedure::text, p.proname,
               ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[]) AS t)
        FROM pg_proc p
        WHERE p.pronamespace = 'hivenet'::regnamespace AND p.prokind = 'f'
          AND has_function_privilege('hivenet_app', p.oid, 'EXECUTE')
        ORDER BY 1""")]


@pytest.fixture
def owner(connect: Callable[..., psycopg.Connection]) -> Iterator[psycopg.Connection]:
    """A connection of the schema owner's, for checksums (and setup)."""
    conn = connect()
    conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
    yield conn


@pytest.fixture
def app(connect: Callable[..., psycopg.Connection]) -> Iterator[psycopg.Connection]:
    """An autocommit connection acting as hivenet_app (each call its own transaction)."""
    conn = connect()
    conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
    with acting_as(conn, "hivenet_app") as as_app:
        yield as_app


def test_the_entry_points_are_read_from_the_catalog(app: psycopg.Connection,
                                                    owner: psycopg.Connection) -> None:
    names = {name for _, name, _ in app_functions(owner)}
    assert {"next_serial", "next_serials", "claim", "begin_step", "finish_step",
            "claim_interface_serial", "parse_serial", "now"} <= names
    missing = {t for _, _, types in app_functions(owner) for t in types} - set(STRATEGIES)
    assert not missing, f"no strategy for argument types {missing}: add one"


def call(app: psycopg.Connection, name: str, types: list[str], args: list[Any]) -> None:
    casts = ", ".join(f"%s::{t}" for t in types)
    app.execute(f"SELECT * FROM hivenet.{name}({casts})", args).fetchall()


def refusal_problem(error: psycopg.Error) -> str | None:
    """What is wrong with a refusal (None: a documented SQLSTATE, a message of a few lines)."""
    message = error.diag.message_primary or ""
    shown = f"{error.diag.sqlstate}: {message[:300]!r} ({len(message)} characters)"
    if error.diag.sqlstate not in DOCUMENTED:
        return f"undocumented SQLSTATE {shown}"
    if len(message) > 1000:
        return f"the message echoes its input: {shown}"
    return None


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_entry_point_refuses_hostile_input_with_a_documented_code_and_writes_nothing(
        app: psycopg.Connection, owner: psycopg.Connection, data: st.DataObject) -> None:
    # The session's fake clock, hostile too, with fake clocks allowed or not.
    allowed = data.draw(st.booleans(), label="allow_fake_clock")
    owner.execute("UPDATE hivenet.setting SET value = %s WHERE name = 'allow_fake_clock'",
                  (str(allowed).lower(),))
    fake_now = data.draw(st.one_of(st.just(""), st.just("2031-03-01 12:00+00"), texts()),
                         label="hivenet.fake_now")
    app.execute("SELECT set_config('hivenet.fake_now', %s, false)", (fake_now or "",))
    before = checksums(owner)
    for signature, name, types in app_functions(owner):
        args = [data.draw(STRATEGIES[t], label=f"{name} {t}") for t in types]
        try:
            call(app, name, types, args)
        except psycopg.Error as error:
            problem = refusal_problem(error)
            # Outside the except block: the error itself may hold a megabyte.
            assert problem is None, f"{signature}: {problem}"
            assert checksums(owner) == before, f"{signature} wrote before failing"
        else:  # a call that succeeds may write: the next one starts from there
            before = checksums(owner)


# --- the Python repositories ---------------------------------------------------------------------

REPOSITORIES = (SerialRepository, InterfaceDedup, ClaimRepository, StepRepository)
ASYNC_REPOSITORIES = (AsyncSerialRepository, AsyncInterfaceDedup, AsyncClaimRepository,
                      AsyncStepRepository)
FIELD_NAMES = ["system", "module", "instance", "target", "merchant", "shard"]

def _async_body(value: Any) -> Callable[[], Awaitable[Any]]:
    async def body() -> Any:
        return value
    return body


# Strategies by annotation (the modules use `from __future__ import annotations`: strings).
# Python strings may hold NUL, which PostgreSQL text cannot: InvalidInput too.
PARAMETERS: dict[str, st.SearchStrategy[Any]] = {
    "str": texts(nul=True),
    "str | None": texts(nul=True),
    "OnSuccess": texts(nul=True),
    "int": st.sampled_from(INT_EXTREMES) | st.integers(-2**40, 2**40),
    "bool": st.sampled_from([None, True, False]),
    "Any": json_values(nul=True),
    "dt.timedelta | None": st.sampled_from(INTERVALS),
    "timedelta | None": st.sampled_from(INTERVALS),
    "Callable[[], Any]": json_values(nul=True).map(lambda value: lambda: value),
    "Callable[[], Awaitable[Any]]": json_values(nul=True).map(_async_body),
    # A begin's wait, kept short: a key the example finds in progress is waited for.
    "Wait | None": st.sampled_from([None, -1, 0, 0.01, dt.timedelta(seconds=-1),
                                    dt.timedelta(0)]),
    # A batch (begin_many, finish_many).
    "Sequence[str]": st.lists(texts(nul=True), max_size=4),
    "Sequence[Any]": st.lists(json_values(nul=True), max_size=4),
    "Iterable[Finish]": st.lists(st.tuples(
        texts(nul=True), st.sampled_from(INT_EXTREMES), st.sampled_from([None, True, False]),
        json_values(nul=True)), max_size=3),
}


def public_methods(classes: tuple[type, ...] = REPOSITORIES
                   ) -> list[tuple[type, str, inspect.Signature]]:
    return [(cls, name, inspect.signature(getattr(cls, name)))
            for cls in classes for name in sorted(vars(cls))
            if not name.startswith("_") and callable(getattr(cls, name))]


def test_the_async_repositories_have_the_same_methods() -> None:
    """The async test below feeds them fewer examples, trusting that they share the sync
    ones' parameters and statements: this keeps the two lists the same."""
    assert [(cls.__name__.removeprefix("Async"), name) for cls, name, _ in
            public_methods(ASYNC_REPOSITORIES)] == [
        (cls.__name__, name) for cls, name, _ in public_methods()]


def test_every_parameter_of_every_method_has_a_strategy() -> None:
    names = {f"{cls.__name__}.{name}" for cls, name, _ in public_methods()}
    assert {"SerialRepository.next_many", "StepRepository.run", "ClaimRepository.set_expiry",
            "InterfaceDedup.claim"} <= names
    for cls, name, signature in public_methods() + public_methods(ASYNC_REPOSITORIES):
        for parameter in list(signature.parameters.values())[1:]:
            assert parameter.annotation in PARAMETERS, (
                f"{cls.__name__}.{name}({parameter.name}: {parameter.annotation}): add a strategy")


def draw_call(data: st.DataObject, name: str,
              signature: inspect.Signature) -> tuple[list[Any], dict[str, Any]]:
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for parameter in list(signature.parameters.values())[1:]:
        label = f"{name} {parameter.name}"
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:  # the fields of a format
            kwargs |= data.draw(st.dictionaries(st.sampled_from(FIELD_NAMES),
                                                texts(nul=True), max_size=5), label=label)
        elif parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            if data.draw(st.booleans(), label=f"{label} given"):
                kwargs[parameter.name] = data.draw(PARAMETERS[parameter.annotation], label=label)
        else:
            args.append(data.draw(PARAMETERS[parameter.annotation], label=label))
    return args, kwargs


OPERATOR = "hivenet_operator_test"


@pytest.fixture
def admin(hivenet_url: str, owner: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """The caller's connection (a transaction of its own per call) acting as an operator's
    login granted hivenet_app and hivenet_admin, which may run every method, the operator's
    too."""
    owner.execute(f"CREATE ROLE {OPERATOR} IN ROLE hivenet_app, hivenet_admin")
    try:
        with psycopg.connect(hivenet_url) as conn:
            conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
            conn.execute(f"SET ROLE {OPERATOR}")
            conn.commit()
            yield conn
    finally:
        owner.execute(f"DROP ROLE {OPERATOR}")


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_repository_method_raises_only_hivenet_errors_and_writes_nothing(
        admin: psycopg.Connection, owner: psycopg.Connection, data: st.DataObject) -> None:
    before = checksums(owner)
    for cls, name, signature in public_methods():
        args, kwargs = draw_call(data, name, signature)
        problem = None
        try:
            result = getattr(cls(admin), name)(*args, **kwargs)
            if hasattr(result, "__enter__"):  # StepRepository.step
                with result:
                    pass
            admin.commit()
        except HivenetError:
            admin.rollback()
            problem = "" if checksums(owner) == before else "wrote before failing"
        except Exception as error:
            admin.rollback()
            problem = f"{type(error).__name__}: {str(error)[:300]}"
        else:  # a call that succeeds may write: the next one starts from there
            before = checksums(owner)
        assert not problem, f"{cls.__name__}.{name}: {problem}"


async def _call_async(url: str, cls: type, name: str, args: list[Any],
                      kwargs: dict[str, Any]) -> str | None:
    """Call one async method on a connection acting as OPERATOR: None when it succeeded,
    '' when it raised a HivenetError, else what it raised."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute(f"SET ROLE {OPERATOR}")
        await conn.execute(f"SET statement_timeout = '{STATEMENT_TIMEOUT}'")
        try:
            result = getattr(cls(conn), name)(*args, **kwargs)
            if hasattr(result, "__aenter__"):  # AsyncStepRepository.step
                async with result:
                    pass
            else:
                await result
            await conn.commit()
        except HivenetError:
            await conn.rollback()
            return ""
        except Exception as error:
            await conn.rollback()
            return f"{type(error).__name__}: {str(error)[:300]}"
    return None


@settings(max_examples=max(EXAMPLES // 8, 3), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_every_async_repository_method_raises_only_hivenet_errors_and_writes_nothing(
        hivenet_url: str, admin: psycopg.Connection, owner: psycopg.Connection,
        data: st.DataObject) -> None:
    before = checksums(owner)
    for cls, name, signature in public_methods(ASYNC_REPOSITORIES):
        args, kwargs = draw_call(data, name, signature)
        outcome = asyncio.run(_call_async(hivenet_url, cls, name, args, kwargs))
        problem = outcome
        if outcome == "" and checksums(owner) != before:
            problem = "wrote before failing"
        elif outcome is None:  # a call that succeeds may write: the next one starts there
            before = checksums(owner)
        assert not problem, f"{cls.__name__}.{name}: {problem}"


# --- the findings of issue 10, one test each ---------------------------------------------------

UNIFIED_FIELDS = '{"system": "C0001", "module": "A01", "instance": "01"}'


def refused(conn: psycopg.Connection, sql: str, params: Any = None) -> psycopg.Error:
    """The error ``sql`` raises (the test fails if it succeeds)."""
    with pytest.raises(psycopg.Error) as caught:
        conn.execute(sql, params)
    return caught.value


def test_set_claim_expiry_refuses_a_megabyte_namespace_as_claim_does(
        owner: psycopg.Connection) -> None:
    """It failed with 54000 (index row too large) after passing its own checks."""
    before = checksums(owner)
    for namespace in ["n" * MEGABYTE, "n" * 256, "é" * 256]:
        error = refused(owner, "SELECT hivenet.set_claim_expiry(%s, '1 day')", (namespace,))
        assert error.diag.sqlstate == "HN001"
        assert "is longer than 255 characters" in (error.diag.message_primary or "")
    assert checksums(owner) == before
    owner.execute("SELECT hivenet.set_claim_expiry(%s, '1 day')", ("🐝" * 255,))


@pytest.mark.parametrize(("sql", "code"), [
    ("SELECT hivenet.finish_step(%s, 1, NULL)", "HN001"),
    ("SELECT hivenet.finish_step(%s, 1, true)", "HN033"),
    ("SELECT hivenet.resolve_step(%s, 1, true, '')", "HN001"),
    ("SELECT hivenet.resolve_step(%s, 1, true, 'looked')", "HN033"),
    ("SELECT hivenet.begin_step(%s, NULL, 'replay', NULL, NULL, true)", "HN001"),
    ("SELECT hivenet.set_claim_expiry(%s, '1 day')", "HN001"),
    ("SELECT hivenet.claim(%s, 'k')", "HN001"),
    ("SELECT hivenet.claim('n', %s)", "HN001"),
    ("SELECT hivenet.parse_serial(%s)", "HN001"),
    ("SELECT hivenet.next_serial(%s, '{}')", "HN001"),
    ("SELECT hivenet.next_serials(%s, '{}', 10001)", "HN001"),
    (f"SELECT hivenet.next_serial('unified', '{UNIFIED_FIELDS}'::jsonb || "
     "jsonb_build_object('system', %s::text))", "HN001"),
    ("SELECT hivenet.claim_interface_serial(%s)", "HN001"),
])
def test_messages_echo_a_short_prefix_and_the_length(owner: psycopg.Connection, sql: str,
                                                     code: str) -> None:
    """A megabyte in any argument: the message shows its first characters and its length,
    never the value (it goes to the client and the server log)."""
    error = refused(owner, sql, ("x" * MEGABYTE,))
    message = error.diag.message_primary or ""
    assert (error.diag.sqlstate, len(message) < 400) == (code, True), message[:400]
    assert "(1000000 characters)" in message


@pytest.mark.parametrize("allowed", [True, False])
def test_the_application_role_gets_the_fake_clock_or_hn001(
        app: psycopg.Connection, owner: psycopg.Connection, allowed: bool) -> None:
    """hivenet.now() as hivenet_app with hivenet.fake_now set gave 42501 (the role may not
    read the setting allow_fake_clock): now the fake time where fake clocks are allowed (an
    application's own tests), HN001 where not, as for the owner."""
    owner.execute("UPDATE hivenet.setting SET value = %s WHERE name = 'allow_fake_clock'",
                  (str(allowed).lower(),))
    app.execute("SET hivenet.fake_now = '2031-03-01 12:00+00'")
    if allowed:
        assert scalar(app, "SELECT hivenet.now()") == dt.datetime(2031, 3, 1, 12,
                                                                  tzinfo=dt.UTC)
        serial = scalar(app, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
        assert serial[10:18] == "20310301"
    else:
        for sql in ["SELECT hivenet.now()",
                    "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')"]:
            error = refused(app, sql)
            assert error.diag.sqlstate == "HN001"
            assert "does not allow a fake clock" in (error.diag.message_primary or "")
    app.execute("RESET hivenet.fake_now")
    assert scalar(app, "SELECT hivenet.now() > '2026-01-01'")


def test_next_serials_takes_at_most_max_serials_per_call(app: psycopg.Connection,
                                                         owner: psycopg.Connection) -> None:
    """One call for a million held a backend for 20 s and took a million of the scope's
    capacity: now HN001 beyond the setting (10,000 by default), naming the count and limit."""
    many = f"SELECT count(*) FROM hivenet.next_serials('unified', '{UNIFIED_FIELDS}', %s)"
    assert scalar(app, many, (10_000,)) == 10_000
    before = checksums(owner)
    for count in [10_001, 1_000_000, 2**31 - 1]:
        error = refused(app, many, (count,))
        message = error.diag.message_primary or ""
        assert error.diag.sqlstate == "HN001"
        assert f"count {count} is more than the 10000 serials" in message
        assert "max_serials_per_call" in message
    assert checksums(owner) == before
    owner.execute("UPDATE hivenet.setting SET value = '20' WHERE name = 'max_serials_per_call'")
    assert scalar(app, many, (20,)) == 20
    assert refused(app, many, (21,)).diag.sqlstate == "HN001"
    with pytest.raises(InvalidInput, match="count 21 is more than the 20 serials"):
        SerialRepository(app).next_many("unified", 21, system="C0001", module="A01",
                                        instance="01")


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.5", "", "99999999999"])
def test_max_serials_per_call_must_be_a_positive_integer(owner: psycopg.Connection,
                                                         value: str) -> None:
    error = refused(owner, "UPDATE hivenet.setting SET value = %s "
                           "WHERE name = 'max_serials_per_call'", (value,))
    assert error.diag.sqlstate == "HN001"
    assert "is not a valid count" in (error.diag.message_primary or "")


def _nested(depth: int) -> Any:
    value: Any = "leaf \\u0000"  # a backslash, then the text u0000: no NUL
    for _ in range(depth):
        value = {"a": [value]}
    return value


def test_a_string_like_the_escape_of_nul_is_sent(owner: psycopg.Connection) -> None:
    """A backslash, then the text u0000, is no NUL: JSON writes it with the backslash escaped."""
    assert RequestRepository(owner).begin("json", "k", _nested(3)).started


@pytest.mark.parametrize(("call", "message"), [
    (lambda db: SerialRepository(db).next("unified", system="C\x000001", module="A01",
                                          instance="01"), "fields holds a NUL"),
    (lambda db: ClaimRepository(db).claim("n\x00", "k"),
     "namespace holds a NUL character (character 2 of 2)"),
    (lambda db: StepRepository(db).begin("x", {"a": ["\x00"]}), "request or response holds"),
    # the text of a NUL's escape next to a NUL: the quick test for an escape does not stop
    (lambda db: RequestRepository(db).finish("n", "k", 1, True, ["\\u0000", "\\\x00"]),
     "request or response holds a NUL"),
    (lambda db: SerialRepository(db).next_many("unified", 2**31, system="C0001",
                                               module="A01", instance="01"),
     "count 2147483648 is out of range"),
    (lambda db: StepRepository(db).finish("x", -2**31 - 1, True), "attempt -2147483649 is out"),
    # Issue 29 point 6: 22P02 from the database, a RecursionError in Python.
    (lambda db: StepRepository(db).begin("x", {"amount": float("nan")}), "holds NaN or Infinity"),
    (lambda db: RequestRepository(db).begin("n", "k", [float("inf")]), "holds NaN or Infinity"),
    (lambda db: RequestRepository(db).finish("n", "k", 1, True, {"a": -float("inf")}),
     "holds NaN or Infinity"),
    (lambda db: RequestRepository(db).begin("n", "k", _nested(500)), "nested too deeply"),
])
def test_python_arguments_postgresql_cannot_take_are_invalid_input(
        owner: psycopg.Connection, call: Callable[[psycopg.Connection], Any],
        message: str) -> None:
    """NUL (psycopg's DataError, or 22P05 in JSON) and ints beyond integer (42883) escaped as
    errors that are not hivenet's."""
    with pytest.raises(InvalidInput) as caught:
        call(owner)
    assert message in caught.value.message
