"""Seed 004's numeric time serial (format time_id: ``(yyMMddHHmmss << 14) | seq``), numeric
formats of one's own, and the clock policy of every format that prints a time (SPEC §2,
guarantee 3, HN011): the layout and its parse back, 16,383 a second, each policy under 8
clients across a clock step back, the wait's bounds, and the latest instant kept across a
restart and a kill -9."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
import time

import psycopg
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.types.json import Jsonb

from hivenet_db import (
    AsyncSerialRepository,
    ClockBehind,
    InvalidInput,
    SerialRepository,
    TimeId,
    parse_time_id,
)
from hivenet_db import sqlalchemy as hsa
from hivenet_db._execute import SyncDB
from hivenet_db.metrics import read
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres
from tests.command import in_process
from tests.helpers import (
    Connect,
    Issued,
    SetClock,
    assert_never_backwards,
    async_connection,
    failure,
    in_parallel,
    run_sql,
    scalar,
)
from tests.test_crash import crashable  # noqa: F401  (the fixture: a server the test kills)

NEXT = "SELECT hivenet.next_time_id()"
CLIENTS = 8
CALLS = 9  # per client and phase: every third a batch of three


def _number(local: str) -> int:
    """The yyMMddHHmmss number of a business-local time 'YYYY-MM-DD HH:MI:SS'."""
    return int(dt.datetime.fromisoformat(local).strftime("%y%m%d%H%M%S"))


def test_seed_004s_example(db: psycopg.Connection, fake_clock: SetClock) -> None:
    """250413120000 with seq 1 (seed 004: 2025-04-13 12:00:00, seq 0001)."""
    fake_clock(db, "2025-04-13 12:00:00+00")
    first = scalar(db, NEXT)
    assert first == (250413120000 << 14) | 1 == 4102768558080001
    assert scalar(db, "SELECT hivenet.parse_time_id(%s)", (first,)) == {
        "format": "time_id", "datetime": "2025-04-13T12:00:00", "seq": 1}


def test_hours_are_on_the_24_hour_clock_of_the_business_time_zone(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    """Seed 004's pattern yyMMddhhmmss would print 03 at 15:04; time_id prints 15."""
    db.execute("UPDATE hivenet.setting SET value = 'Asia/Shanghai' WHERE name = 'time_zone'")
    fake_clock(db, "2025-04-13 07:04:05+00")  # 15:04:05 in Shanghai
    assert scalar(db, NEXT) >> 14 == 250413150405


def test_seq_counts_from_1_each_second_and_ids_grow(db: psycopg.Connection,
                                                    fake_clock: SetClock) -> None:
    fake_clock(db, "2026-03-01 12:00:00+00")
    first = [scalar(db, NEXT) for _ in range(3)]
    fake_clock(db, "2026-03-01 12:00:01+00")
    batch = [r[0] for r in db.execute("SELECT hivenet.next_time_ids('time_id', 4)")]
    assert [i & 16383 for i in first + batch] == [1, 2, 3, 1, 2, 3, 4]
    assert [i >> 14 for i in first + batch] == [260301120000] * 3 + [260301120001] * 4
    assert first + batch == sorted(first + batch)


def test_the_real_clock_takes_the_fast_path_and_prints_its_second(db: psycopg.Connection) -> None:
    before = dt.datetime.now(dt.UTC).replace(tzinfo=None, microsecond=0)
    ids = [scalar(db, NEXT) for _ in range(5)]
    ids += [r[0] for r in db.execute("SELECT * FROM hivenet.next_time_ids('time_id', 100)")]
    after = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for value in ids:
        assert before <= parse_time_id(value).datetime <= after  # type: ignore[operator]


def test_16383_in_one_second_then_hn010(db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, "2026-03-01 12:00:00+00")
    ids = [r[0] for r in db.execute("SELECT * FROM hivenet.next_time_ids('time_id', 10000)")]
    ids += [r[0] for r in db.execute("SELECT * FROM hivenet.next_time_ids('time_id', 6383)")]
    assert [i & 16383 for i in ids] == list(range(1, 16384))
    assert {i >> 14 for i in ids} == {260301120000}
    state, message = failure(db, NEXT)
    assert state == "HN010" and "all 16383 serials" in message and "12:00:00" in message
    fake_clock(db, "2026-03-01 12:00:01+00")
    assert scalar(db, NEXT) == (260301120001 << 14) | 1


def test_parse_time_id_in_python_agrees_with_sql(db: psycopg.Connection,
                                                 fake_clock: SetClock) -> None:
    fake_clock(db, "2026-03-01 23:59:59+00")
    issued = scalar(db, NEXT)
    bad_time = (261301000000 << 14) | 1  # month 13
    for value in (issued, 0, -5, bad_time, 260301235959 << 14, 1 << 62):
        try:
            expected = scalar(db, "SELECT hivenet.parse_time_id(%s)", (value,))
        except psycopg.Error as error:
            assert error.diag.sqlstate == "HN001"
            with pytest.raises(InvalidInput) as raised:
                parse_time_id(value)
            assert raised.value.message == error.diag.message_primary
        else:
            parsed = parse_time_id(value)
            assert isinstance(parsed, TimeId) and parsed == value
            assert (parsed.format, parsed.seq, parsed.datetime) == (
                "time_id", expected["seq"], dt.datetime.fromisoformat(expected["datetime"]))


# Ids of real times (2000-2099, what yyMMdd reads) with any seq, and any bigint.
_IDS = st.one_of(
    st.builds(lambda when, seq: (int(when.strftime("%y%m%d%H%M%S")) << 14) | seq,
              st.datetimes(min_value=dt.datetime(2000, 1, 1),
                           max_value=dt.datetime(2099, 12, 31)),
              st.integers(min_value=0, max_value=16383)),
    st.integers(min_value=-(2**63), max_value=2**63 - 1))


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_IDS)
def test_parse_time_id_agrees_on_any_bigint(db: psycopg.Connection, value: int) -> None:
    try:
        expected = scalar(db, "SELECT hivenet.parse_time_id(%s)", (value,))
    except psycopg.Error as error:
        with pytest.raises(InvalidInput) as raised:
            parse_time_id(value)
        assert raised.value.message == error.diag.message_primary
    else:
        parsed = parse_time_id(value)
        assert (parsed.seq, parsed.datetime) == (
            expected["seq"], dt.datetime.fromisoformat(expected["datetime"]))


@pytest.mark.parametrize(("sql", "says"), [
    ("SELECT hivenet.next_serial('time_id', '{}')", "numeric (a bigint): next_time_id"),
    ("SELECT hivenet.next_time_id('unified')", "a text format: next_serial"),
    ("SELECT hivenet.parse_serial('12345', 'time_id')", "numeric (a bigint): parse_time_id"),
    ("SELECT hivenet.parse_time_id(1, 'unified')", "a text format: parse_serial"),
    ("SELECT hivenet.next_time_id('nope')", "unknown format 'nope'"),
    ("SELECT hivenet.next_time_id('time_id', '{\"x\": \"1\"}')", "has no field 'x'"),
    ("SELECT hivenet.next_time_ids('time_id', 0)", "count 0 must be from 1 to 10000"),
    ("SELECT hivenet.next_time_ids('time_id', 10001)", "count 10001 must be from 1 to 10000"),
])
def test_numeric_and_text_formats_are_not_mixed_up(db: psycopg.Connection, sql: str,
                                                   says: str) -> None:
    state, message = failure(db, sql)
    assert state == "HN001" and says in message, message


ORDER_ID = """SELECT hivenet.define_format('order_id', '[{"time": "yyMMddHHmmss"},
    {"field": "instance", "width": 2, "bits": 7, "min": 1, "max": 99}, {"seq_bits": 14}]')"""


def test_a_numeric_format_with_instance_bits(db: psycopg.Connection, fake_clock: SetClock) -> None:
    """Seed 004's closing remark: a machine id in the bits, so that several primaries (each
    owning its instances) never issue the same id."""
    db.execute(ORDER_ID)
    row = db.execute("SELECT length, capacity, time_shift FROM hivenet.format "
                     "WHERE name = 'order_id'").fetchone()
    assert row == (61, 16383, 21)
    fake_clock(db, "2026-03-01 12:00:00+00")  # before preparing: the real clock is later
    for instance in ("03", "04"):
        db.execute("SELECT hivenet.prepare_scope('order_id', %s)", (Jsonb({"instance": instance}),))
    three = scalar(db, "SELECT hivenet.next_time_id('order_id', '{\"instance\": \"03\"}')")
    four = scalar(db, "SELECT hivenet.next_time_id('order_id', '{\"instance\": \"04\"}')")
    assert three == (260301120000 << 21) | (3 << 14) | 1
    assert four == (260301120000 << 21) | (4 << 14) | 1
    assert scalar(db, "SELECT hivenet.parse_time_id(%s, 'order_id')", (four,)) == {
        "format": "order_id", "instance": "04", "datetime": "2026-03-01T12:00:00", "seq": 1}
    batch = [r[0] for r in db.execute(
        "SELECT * FROM hivenet.next_time_ids('order_id', 3, '{\"instance\": \"03\"}')")]
    assert [i & 16383 for i in batch] == [2, 3, 4] and {(i >> 14) & 127 for i in batch} == {3}
    state, message = failure(db, "SELECT hivenet.next_time_id('order_id', "
                                 "'{\"instance\": \"00\"}')")
    assert state == "HN001" and "'00' must be from 01 to 99" in message
    state, message = failure(db, "SELECT hivenet.parse_time_id(%s, 'order_id')",
                             ((260301120000 << 21) | (100 << 14) | 1,))
    assert state == "HN001" and "field instance '100' must be 2 digit characters" in message


@pytest.mark.parametrize(("segments", "says"), [
    ('[{"time": "yyMMddHHmmss"}, {"seq_bits": 24}]',
     "up to 991231235959: 40 bits) shifted left by the 24 bits below it takes 64 bits"),
    ('[{"time": "YYYYMMDDHHMISS"}, {"field": "i", "width": 2, "bits": 7}, {"seq_bits": 14}]',
     "takes 68 bits, more than the 63 of a positive bigint"),
    ('[{"time": "yyMMddHHmmss"}, {"field": "i", "width": 3, "bits": 7}, {"seq_bits": 14}]',
     'field "i": values up to 999 do not fit 7 bits'),
    ('[{"field": "i", "width": 2, "bits": 7}, {"time": "yyMMddHHmmss"}, {"seq_bits": 14}]',
     "is its time first, then fields with bits, then seq_bits last"),
    ('[{"time": "yyMMddHHmmss"}, {"literal": "A"}, {"seq_bits": 14}]', "no literal or seq"),
    ('[{"time": "yyMMddHHmmss"}, {"seq_bits": 14}, {"field": "i", "width": 2, "bits": 7}]',
     "ends with its seq_bits"),
    ('[{"time": "yyMMddHHmmss"}, {"seq_bits": 14, "reset": "day"}]',
     "resets when its time changes: reset day, but the time shows the second"),
    ('[{"time": "yyMMddHHmmss"}, {"seq_bits": 0}]', "seq_bits must be 1 to 62"),
    ('[{"time": "yyMMddHHmmss"}, {"field": "i", "width": 2, "charset": "alnum", "bits": 7}, '
     '{"seq_bits": 14}]', "digits, printed, with bits 1 to 62"),
    ('[{"field": "i", "width": 2, "bits": 7}, {"time": "YYYYMMDD"}, {"seq": 4}]',
     "bits are for numeric formats"),
])
def test_numeric_formats_are_checked_when_defined(db: psycopg.Connection, segments: str,
                                                  says: str) -> None:
    state, message = failure(db, "SELECT hivenet.define_format('mine', %s)", (segments,))
    assert state == "HN001" and says in message, message


def test_repositories_issue_and_parse_time_ids(any_conn: SyncDB, fake_clock: SetClock,
                                               db: psycopg.Connection) -> None:
    """As the application login, on each kind of connection; a refusal is ClockBehind."""
    repo = SerialRepository(any_conn)
    one = repo.next_time_id()
    many = repo.next_time_ids(3)
    assert type(one) is int and many == sorted(many) and one < many[0]
    assert parse_time_id(many[0]).seq >= 1
    db.execute("SELECT hivenet.set_clock_policy('time_id', 'refuse')")
    an_hour_back = parse_time_id(one).datetime - dt.timedelta(hours=1)  # type: ignore[operator]
    run_sql(any_conn, "SELECT set_config('hivenet.fake_now', %(t)s, true)",
            t=f"{an_hour_back}+00")
    with pytest.raises(ClockBehind, match="its clock policy is 'refuse'"):
        repo.next_time_id()


def test_the_async_repository_issues_time_ids(hivenet_app_url: str) -> None:
    async def issue() -> tuple[int, list[int]]:
        async with async_connection("psycopg-async", hivenet_app_url) as conn:
            repo = AsyncSerialRepository(conn)
            return await repo.next_time_id(), await repo.next_time_ids(2)
    one, two = asyncio.run(issue())
    assert one < two[0] < two[1]


def test_a_bigint_column_defaults_to_a_time_id(hivenet_engine: sa.Engine) -> None:
    metadata = sa.MetaData()
    orders = sa.Table("orders", metadata, sa.Column("id", sa.BigInteger, primary_key=True,
                                                    server_default=hsa.next_time_id()),
                      sa.Column("note", sa.Text))
    metadata.create_all(hivenet_engine)
    with hivenet_engine.begin() as conn:
        ids = [conn.execute(sa.insert(orders).values(note=n).returning(orders.c.id)).scalar_one()
               for n in ("a", "b")]
        batch = conn.execute(sa.select(hsa.next_time_ids(3))).scalars().all()
    assert ids[0] < ids[1] < batch[0] and len(batch) == 3
    assert parse_time_id(ids[0]).format == "time_id"


def test_the_command_issues_and_parses_time_ids(hivenet_url: str, db: psycopg.Connection,
                                                fake_clock: SetClock) -> None:
    def run(*args: str) -> str:
        done = in_process(*args, "--url", hivenet_url)
        assert done.returncode == 0, done.stderr
        return done.stdout

    ids = [int(line) for line in run("next", "time_id", "-n", "3").split()]
    assert len(ids) == 3 and ids == sorted(ids)
    (row,) = [json.loads(line) for line in run("next", "time_id", "--json").splitlines()]
    assert row["id"] > ids[-1] and row["format"] == "time_id" and row["seq"] >= 1
    assert json.loads(run("parse", "4102768558080001", "--json")) == {
        "id": 4102768558080001, "format": "time_id", "datetime": "2025-04-13T12:00:00",
        "seq": 1}
    db.execute(ORDER_ID)
    fake_clock(db, "2026-03-01 12:00:00+00")
    db.execute("SELECT hivenet.prepare_scope('order_id', '{\"instance\": \"03\"}')")
    (row,) = [json.loads(line) for line in run(
        "next", "order_id", "--instance", "03", "--json").splitlines()]
    assert row["instance"] == "03" and json.loads(
        run("parse", str(row["id"]), "--format", "order_id", "--json")) == row


def _issue(conn: psycopg.Connection, client: int, call: int) -> list[Issued]:
    started = time.monotonic_ns()
    if call % 3 == 2:
        values = [r[0] for r in conn.execute("SELECT * FROM hivenet.next_time_ids('time_id', 3)")]
    else:
        values = [scalar(conn, NEXT)]
    return [Issued(v, client, started, time.monotonic_ns()) for v in values]


def _phases(connect: Connect, clocks: list[str]) -> tuple[list[list[Issued]], list[list[str]]]:
    """CLIENTS connections issue CALLS calls at each clock of ``clocks`` in turn (all at one
    clock at a time; '' is the real clock): per phase, what was issued (each client's in its
    own order) and the SQLSTATEs of the calls refused."""
    conns = [connect() for _ in range(CLIENTS)]
    issued: list[list[Issued]] = [[] for _ in clocks]
    refused: list[list[str]] = [[] for _ in clocks]

    def work(conn: psycopg.Connection, barrier: threading.Barrier) -> None:
        client = conns.index(conn)
        for phase, clock in enumerate(clocks):
            barrier.wait()
            conn.execute("SELECT set_config('hivenet.fake_now', %s, false)", (clock,))
            for call in range(CALLS):
                try:
                    issued[phase] += _issue(conn, client, call)
                except psycopg.Error as error:
                    refused[phase].append(error.diag.sqlstate or "")

    in_parallel(conns, work)
    return issued, refused


def _all(phases: list[list[Issued]]) -> list[Issued]:
    """Every phase's, each client's in its own order."""
    return sorted((i for phase in phases for i in phase), key=lambda i: (i.client, i.started))


def _seconds(issued: list[Issued]) -> set[dt.datetime]:
    """The seconds the ids print (a time id always prints one)."""
    seconds = {parse_time_id(i.serial).datetime for i in issued}
    assert None not in seconds
    return {second for second in seconds if second is not None}


T = "2026-03-01 12:00:05+00"
HOUR_BACK = "2026-03-01 11:00:05+00"


def test_continue_issues_at_the_latest_second_after_a_step_back(
        connect: Connect, db: psycopg.Connection, fake_clock: SetClock) -> None:
    issued, refused = _phases(connect, [T, HOUR_BACK])
    assert refused == [[], []] and len(issued[1]) == CLIENTS * (CALLS + 2 * (CALLS // 3))
    assert _seconds(_all(issued)) == {dt.datetime(2026, 3, 1, 12, 0, 5)}
    assert_never_backwards(_all(issued))


def test_refuse_refuses_every_call_while_the_clock_is_behind(
        connect: Connect, db: psycopg.Connection, fake_clock: SetClock) -> None:
    db.execute("SELECT hivenet.set_clock_policy('time_id', 'refuse')")
    issued, refused = _phases(connect, [T, HOUR_BACK, "2026-03-01 12:00:06+00"])
    assert refused[0] == refused[2] == [] and refused[1] == ["HN011"] * CLIENTS * CALLS
    assert issued[1] == [] and _seconds(issued[2]) == {dt.datetime(2026, 3, 1, 12, 0, 6)}
    assert_never_backwards(_all(issued))


def test_wait_waits_for_the_clock_to_reach_the_latest_second(
        connect: Connect, db: psycopg.Connection, fake_clock: SetClock) -> None:
    """Ids issued at a clock seconds ahead of the real one, then on the real clock: every
    call of the second phase waits until the real clock reaches that second."""
    db.execute("SELECT hivenet.set_clock_policy('time_id', 'wait', '20 seconds')")
    # Far enough ahead that the first phase is over before the real clock gets there.
    ahead = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=8)
    issued, refused = _phases(connect, [ahead.isoformat(), ""])
    assert refused == [[], []]
    first_call = min(issued[1], key=lambda i: i.started)
    # It started while the real clock was behind, and returned once it had caught up.
    waited = (first_call.ended - first_call.started) / 1e9
    assert waited > 0.5, waited
    assert _seconds(issued[0]) == {ahead.replace(tzinfo=None)}
    assert min(_seconds(issued[1])) >= ahead.replace(tzinfo=None)
    assert_never_backwards(_all(issued))


def test_wait_refuses_at_once_when_the_clock_is_further_behind_than_max_wait(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    db.execute("SELECT hivenet.set_clock_policy('time_id', 'wait', '2 seconds')")
    fake_clock(db, T)
    db.execute(NEXT)
    fake_clock(db, HOUR_BACK)
    started = time.monotonic()
    state, message = failure(db, NEXT)
    assert state == "HN011" and "is 01:00:00 behind" in message
    assert "'wait', at most 00:00:02 (its max_wait)" in message
    assert time.monotonic() - started < 1.5


def test_wait_is_bounded_by_max_wait(db: psycopg.Connection, fake_clock: SetClock) -> None:
    """The fake clock never moves: the call waits what max_wait allows, then refuses."""
    db.execute("SELECT hivenet.set_clock_policy('time_id', 'wait', '1 second')")
    fake_clock(db, T)
    db.execute(NEXT)
    fake_clock(db, "2026-03-01 12:00:04.7+00")  # 0.3 s behind
    started = time.monotonic()
    state, message = failure(db, NEXT)
    waited = time.monotonic() - started
    assert state == "HN011" and "(its max_wait)" in message, message
    assert 0.6 <= waited <= 1.0 + 0.5


def test_wait_never_outlasts_the_statement_timeout(db: psycopg.Connection,
                                                   fake_clock: SetClock) -> None:
    db.execute("SELECT hivenet.set_clock_policy('time_id', 'wait', '30 seconds')")
    fake_clock(db, T)
    db.execute(NEXT)
    fake_clock(db, "2026-03-01 12:00:04.6+00")  # 0.4 s behind
    db.execute("SET statement_timeout = '1s'")
    started = time.monotonic()
    state, message = failure(db, NEXT)  # HN011, never the server's cancel (57014)
    assert state == "HN011" and "what the statement's timeout leaves" in message, message
    assert time.monotonic() - started < 1.0


def test_every_format_that_prints_a_time_follows_its_policy(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    interface = "SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')"
    unified = "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')"
    for fmt in ("interface", "unified"):
        db.execute("SELECT hivenet.set_clock_policy(%s, 'refuse')", (fmt,))
    fake_clock(db, "2026-03-02 00:00:30+00")
    issued = [scalar(db, interface), scalar(db, unified)]
    fake_clock(db, "2026-03-02 00:00:10+00")  # 20 s back: only the interface serial's time
    assert failure(db, interface)[0] == "HN011"
    assert scalar(db, unified) > issued[1]
    fake_clock(db, "2026-03-01 23:59:50+00")  # across midnight: the unified serial's date too
    state, message = failure(db, unified)
    assert state == "HN011" and "2026-03-02 00:00:00" in message
    state, message = failure(db, "SELECT hivenet.set_clock_policy('nodate', 'refuse')")
    assert state == "HN001" and "unknown format" in message
    db.execute("""SELECT hivenet.define_format('nodate', '[{"literal": "N"},
        {"seq": 4, "reset": "never"}]')""")
    state, message = failure(db, "SELECT hivenet.set_clock_policy('nodate', 'refuse')")
    assert state == "HN001" and "prints no date or time" in message


def test_the_clock_lead_is_a_gauge(db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, T)
    db.execute(NEXT)
    db.execute("SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')")
    fake_clock(db, HOUR_BACK)
    lead = {s.labels["format"]: s.value for m in read(db) if m.name == "hivenet_clock_lead_seconds"
            for s in m.samples}
    assert lead["time_id"] == lead["interface"] == 3600.0
    assert lead["unified"] == lead["per_second"] == 0.0
    assert db.execute("SELECT on_clock_behind, latest_issued FROM hivenet.clock_lead "
                      "WHERE format = 'time_id'").fetchone() == (
        "continue", dt.datetime(2026, 3, 1, 12, 0, 5))


def test_time_id_belongs_to_the_single_primary_once_ownership_is_declared(
        db: psycopg.Connection) -> None:
    """time_id's scope is prepared at install: declaring instances parks it while it has
    issued nothing (no refusal), and the single primary issues it."""
    assert scalar(db, "SELECT hivenet.own_instances('01-09')") == "01-09"
    assert failure(db, NEXT)[0] == "HN002"
    db.execute("SELECT hivenet.own_instances('01-09', true)")
    db.execute(NEXT)
    state, message = failure(db, "SELECT hivenet.own_instances('01-09', false)")
    assert state == "HN001" and "format time_id scope ''" in message


def test_restart_and_kill_keep_the_latest_second(crashable: EmbeddedPostgres) -> None:  # noqa: F811
    """The latest second issued is the counter's own sequence, in the database: a clean
    restart and a kill -9 keep it for every committed id (SPEC §6)."""
    url = crashable.url("crash")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'")
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY)")
        conn.execute("SELECT set_config('hivenet.fake_now', %s, false)", (T,))
        conn.execute("INSERT INTO orders SELECT hivenet.next_time_id() FROM generate_series(1, 5)")
    crashable.stop()
    crashable.start()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT set_config('hivenet.fake_now', %s, false)", (HOUR_BACK,))
        after_restart = scalar(conn, NEXT)
        assert after_restart > scalar(conn, "SELECT max(id) FROM orders")
        conn.execute("SELECT set_config('hivenet.fake_now', '2026-03-01 12:00:09+00', false)")
        conn.execute("INSERT INTO orders SELECT hivenet.next_time_id() FROM generate_series(1, 5)")
        conn.execute("SELECT hivenet.set_clock_policy('time_id', 'refuse')")
    crashable.kill()
    crashable.start()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT set_config('hivenet.fake_now', %s, false)", (HOUR_BACK,))
        state, message = failure(conn, NEXT)
        assert state == "HN011" and "(2026-03-01 12:00:09)" in message
        conn.execute("SELECT hivenet.set_clock_policy('time_id', 'continue')")
        assert scalar(conn, NEXT) > scalar(conn, "SELECT max(id) FROM orders")
