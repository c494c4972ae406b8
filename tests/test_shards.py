"""Several primaries (issue 16, docs/guides/scale-out.md): instance ownership enforced by each
database, the tenant shard map, and reports across shards, on three local clusters of their
own (tests/shard_clusters.py) with real parallel connections."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, String, create_engine, text
from sqlalchemy.ext.horizontal_shard import ShardedSession
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from hivenet_db import InterfaceDedup, SerialRepository, StepRepository
from hivenet_db.errors import UnknownScope
from hivenet_db.shards import Placement, ShardMap, ShardMapError, from_urls
from tests.command import in_process
from tests.helpers import failure, in_parallel, scalar, share_fallback
from tests.shard_clusters import ShardClusters, shard_clusters

UNIFIED = "SELECT hivenet.next_unified_serial('C0001', 'A01', %s)"
INTERFACE = "SELECT hivenet.next_interface_serial('C0001', 'A01', %s, 'B0001')"


@pytest.fixture(scope="module")
def clusters() -> Iterator[ShardClusters]:
    with shard_clusters(3) as found:
        yield found


BUILTIN = ("id_service", "interface", "merchant_trade", "per_second", "system", "unified")


@pytest.fixture
def urls(clusters: ShardClusters) -> Iterator[list[str]]:
    """A database on each cluster whose formats draw unprepared scopes from their shared
    fallback and promote them in maintain(), so that the tests of ownership use any scope
    (with the defaults: test_an_unowned_scope_is_refused_before_it_is_found_unprepared)."""
    with clusters.databases() as found:
        for url in found:
            with psycopg.connect(url, autocommit=True) as conn:
                share_fallback(conn, *BUILTIN, promote=True)
        yield found


@pytest.fixture
def conns(urls: list[str]) -> Iterator[list[psycopg.Connection]]:
    opened = [psycopg.connect(u, autocommit=True) for u in urls]
    try:
        yield opened
    finally:
        for conn in opened:
            conn.close()


def engine(url: str) -> Engine:
    return create_engine("postgresql+psycopg://" + url.split("://", 1)[1])


@pytest.fixture
def engines(urls: list[str]) -> Iterator[dict[str, Engine]]:
    made = {f"s{i}": engine(u) for i, u in enumerate(urls)}
    try:
        yield made
    finally:
        for e in made.values():
            e.dispose()


def own(conns: list[psycopg.Connection], *instances: str) -> None:
    for conn, owned in zip(conns, instances, strict=False):
        conn.execute("SELECT hivenet.own_instances(%s)", (owned,))


# -- instance ownership ------------------------------------------------------------------

def test_an_unowned_scope_is_refused_before_it_is_found_unprepared(
        conns: list[psycopg.Connection]) -> None:
    a = conns[0]
    share_fallback(a)  # the defaults: no fallback
    a.execute("SELECT hivenet.own_instances('01-09')")
    state, message = failure(a, UNIFIED, ("12",))
    assert state == "HN002" and "instance '12' is not owned by this database" in message
    state, message = failure(a, UNIFIED, ("05",))
    assert state == "HN002" and "has no counter for system 'C0001', module 'A01', instance " \
        "'05'" in message
    a.execute("SELECT hivenet.prepare_scope('unified', '{\"system\": \"C0001\", "
              "\"module\": \"A01\", \"instance\": \"05\"}')")
    assert scalar(a, UNIFIED, ("05",)).endswith("0000000001")


def test_the_same_scope_on_two_databases_never_yields_the_same_serial(
        conns: list[psycopg.Connection]) -> None:
    a, b = conns[0], conns[1]
    # Before any declaration both own everything: the collision this issue is about.
    assert scalar(a, UNIFIED, ("01",)) == scalar(b, UNIFIED, ("01",))
    a.execute("SELECT hivenet.own_instances('01-09')")
    # b has used instance 01: giving it up is refused unless forced (tested below).
    b.execute("SELECT hivenet.own_instances('10-19', NULL, true)")
    issued: list[str] = []
    refused: list[str] = []
    for instance in ("02", "05", "12", "15"):
        for conn in (a, b):
            for _ in range(3):
                try:
                    issued.append(scalar(conn, UNIFIED, (instance,)))
                except psycopg.Error as error:
                    assert error.diag.sqlstate == "HN002"
                    refused.append(error.diag.message_primary or "")
        a.execute("SELECT hivenet.maintain()")  # the scopes get their own sequences: fast path
        b.execute("SELECT hivenet.maintain()")
    issued += [scalar(c, UNIFIED, (i,)) for c, i in ((a, "02"), (b, "12")) for _ in range(5)]
    assert len(issued) == len(set(issued)) == 4 * 3 + 10
    assert len(refused) == 4 * 3
    state, message = failure(a, UNIFIED, ("12",))
    assert state == "HN002"
    assert "instance '12' is not owned by this database (it owns 01-09)" in message
    # The fast path of an owned scope with its own sequence still serves, and the refused
    # scope got no sequence here.
    assert scalar(a, "SELECT count(*) FROM hivenet.scope WHERE scope LIKE '%%12'") == 0


def test_id_service_owns_by_its_shard_field_and_prepare_scope_checks(
        conns: list[psycopg.Connection]) -> None:
    a = conns[0]
    own(conns, "00-04")
    fields = {"merchant": "100000000001"}
    names = json.loads(scalar(a, "SELECT hivenet.parse_serial(hivenet.next_serial("
                                 "'id_service', %s), 'id_service')::text",
                              (json.dumps({**fields, "shard": "03"}),)))
    assert names["shard"] == "03"
    state, message = failure(a, "SELECT hivenet.next_serial('id_service', %s)",
                             (json.dumps({**fields, "shard": "07"}),))
    assert state == "HN002"
    assert "shard '07' is not owned by this database (it owns 00-04)" in message
    state, _ = failure(a, "SELECT hivenet.prepare_scope('unified', %s)", (json.dumps(
        {"system": "C0001", "module": "A01", "instance": "09"}),))
    assert state == "HN002"


def test_formats_without_an_instance_are_issued_by_the_single_primary_only(
        conns: list[psycopg.Connection]) -> None:
    a, b = conns[0], conns[1]
    own(conns, "01-09", "10-19")
    b.execute("SELECT hivenet.own_instances('10-19', true)")
    trade = "SELECT hivenet.next_serial('merchant_trade', '{\"merchant\": \"100000000001\"}')"
    state, message = failure(a, trade)
    assert state == "HN002" and "format merchant_trade has no instance or shard field" in message
    assert len(scalar(b, trade)) == 32
    state, _ = failure(a, "SELECT hivenet.next_serial('per_second', '{}')")
    assert state == "HN002"


def test_giving_up_an_instance_with_scopes_is_refused_unless_forced_which_parks_them(
        conns: list[psycopg.Connection]) -> None:
    a = conns[0]
    own(conns, "01-09")
    first = scalar(a, INTERFACE, ("05",))
    unified = scalar(a, UNIFIED, ("05",))
    a.execute("SELECT hivenet.maintain()")
    second = scalar(a, INTERFACE, ("05",))  # from the scope's own sequence
    state, message = failure(a, "SELECT hivenet.own_instances('01-04,06-09')")
    assert state == "HN001" and "scope 'C0001A0105'" in message and "force => true" in message
    assert scalar(a, "SELECT hivenet.own_instances('01-04, 06-09', NULL, true)") == "01-04,06-09"
    # The parked scopes find no sequence (the fast paths' map lost them): the first-use path
    # and its check refuse, as for a scope never used (system).
    state, message = failure(a, INTERFACE, ("05",))
    assert state == "HN002" and "instance '05'" in message
    for sql in (UNIFIED, "SELECT hivenet.next_system_serial('C0001', 'A01', %s)"):
        state, message = failure(a, sql, ("05",))
        assert state == "HN002" and "instance '05'" in message
    assert scalar(a, "SELECT hivenet.own_instances('01-09')") == "01-09"
    third = scalar(a, INTERFACE, ("05",))  # the parked counter, restored
    assert first < second < third
    assert scalar(a, UNIFIED, ("05",)) > unified  # its parked counter, restored
    assert scalar(a, "SELECT owned_instances FROM hivenet.ownership()") == "01-09"
    state, message = failure(a, "UPDATE hivenet.setting SET value = '01-04' "
                                "WHERE name = 'owned_instances'")
    assert state == "HN001" and "force => true" in message
    # An unprepared scope's draw from the fallback is recorded too: giving its instance up
    # needs force, which drops the records of its draws.
    scalar(a, UNIFIED, ("03",))
    assert failure(a, "SELECT hivenet.own_instances('01-02,04-09')")[0] == "HN001"
    assert scalar(a, "SELECT hivenet.own_instances('01-02,04-09', NULL, true)") == "01-02,04-09"
    assert scalar(a, "SELECT count(*) FROM hivenet.fallback_draw WHERE scope LIKE '%03'") == 0
    # A scope prepared and never used is parked without force.
    a.execute("SELECT hivenet.prepare_scope('unified', '{\"system\": \"C0001\", "
              "\"module\": \"A01\", \"instance\": \"08\"}')")
    assert scalar(a, "SELECT hivenet.own_instances('01-02,04-07,09')") == "01-02,04-07,09"
    assert scalar(a, "SELECT sequence_name FROM hivenet.scope WHERE scope = 'C0001A0108'"
                  ) == "off_unified_C0001A0108"


def test_a_wrong_shard_step_or_claim_is_refused(conns: list[psycopg.Connection]) -> None:
    a, b = conns[0], conns[1]
    own(conns, "01-09", "10-19")
    step = scalar(b, "SELECT hivenet.next_system_serial('C0001', 'A01', '12')")
    call = scalar(b, "SELECT hivenet.next_interface_serial('C0001', 'A01', '12', 'C0002')")
    state, message = failure(a, "SELECT hivenet.begin_step(%s)", (step,))
    assert state == "HN002" and "instance '12'" in message and "it owns 01-09" in message
    state, message = failure(a, "SELECT hivenet.claim_interface_serial(%s)", (call,))
    assert state == "HN002" and "instance '12'" in message
    assert scalar(b, "SELECT outcome FROM hivenet.begin_step(%s)", (step,)) == "started"
    b.execute("SELECT hivenet.claim_interface_serial(%s)", (call,))
    # A deployment routing received calls by another key turns the check off.
    a.execute("UPDATE hivenet.setting SET value = 'false' WHERE name = 'check_received_instances'")
    assert scalar(a, "SELECT outcome FROM hivenet.begin_step(%s)", (step,)) == "started"


# -- the shard map -------------------------------------------------------------------------

def test_the_shard_map_places_tenants_and_refuses_a_change_that_moves_one(
        conns: list[psycopg.Connection], engines: dict[str, Engine], urls: list[str],
        tmp_path: Path) -> None:
    own(conns, "01-33", "34-66")
    two = {k: engines[k] for k in ("s0", "s1")}
    path = tmp_path / "shards.json"
    shard_map = ShardMap(two, path=path, urls={"s0": urls[0], "s1": urls[1]})
    placed = [shard_map.place(f"merchant:{i:012d}") for i in range(6)]
    assert {p.shard for p in placed} == {"s0", "s1"}
    assert shard_map.place("C0001/40", "40") == Placement("C0001/40", "40", "s1")
    with pytest.raises(ShardMapError, match="moving a tenant is deliberate"):
        shard_map.place("C0001/40", "05")
    # Adding a shard that owns new instances moves nobody.
    own(conns[2:], "67-99")
    saved = json.loads(path.read_text())
    saved["shards"]["s2"] = urls[2]
    path.write_text(json.dumps(saved))
    grown = ShardMap.load(path, engines)
    assert grown.placements == shard_map.placements
    assert grown.shard_of("C0001/40") == "s1"
    # Moving instance 40 to shard 2 would move the tenant silently: refused, named.
    conns[1].execute("SELECT hivenet.own_instances('34-39,41-66')")
    conns[2].execute("SELECT hivenet.own_instances('40,67-99')")
    with pytest.raises(ShardMapError, match=r"tenant 'C0001/40' is placed on shard 's1'"):
        ShardMap.load(path, engines)
    conns[2].execute("SELECT hivenet.own_instances('67-99')")
    with pytest.raises(ShardMapError, match=r"owned by no shard"):
        ShardMap.load(path, engines)
    conns[2].execute("SELECT hivenet.own_instances('30-40,67-99')")
    with pytest.raises(ShardMapError, match="owned by shards 's0' and 's2'"):
        ShardMap.load(path, engines)


def shard_map_of_three(conns: list[psycopg.Connection], engines: dict[str, Engine]
                       ) -> ShardMap:
    own(conns, "01-33", "34-66", "67-99")
    shard_map = ShardMap(engines)
    for instance in ("03", "17", "35", "50", "68", "90"):
        shard_map.place(f"C0001/{instance}", instance)
    return shard_map


def test_no_duplicate_serial_under_16_clients_across_three_shards(
        conns: list[psycopg.Connection], engines: dict[str, Engine]) -> None:
    shard_map = shard_map_of_three(conns, engines)
    tenants = sorted(shard_map.placements)
    barrier = threading.Barrier(16)
    issued: list[list[str]] = [[] for _ in range(16)]
    errors: list[BaseException] = []

    def client(n: int) -> None:
        rng = random.Random(n)
        try:
            barrier.wait()
            for round_ in range(40):
                tenant = rng.choice(tenants)
                instance = shard_map.instance_of(tenant)
                with shard_map.begin(tenant) as conn:
                    serials = SerialRepository(conn)
                    unified = serials.next_unified("C0001", "A01", instance)
                    step = serials.next_system("C0001", "A01", instance)
                    call = serials.next_interface("C0001", "A01", instance, "C0002")
                    InterfaceDedup(conn).claim(call, unified_serial=unified, system_serial=step)
                    with StepRepository(conn).step(step, {"n": n}) as run:
                        run.response = {"ok": True}
                    issued[n] += [unified, step, call]
                if n == 0 and round_ % 10 == 5:
                    shard_map.maintain()  # new scopes get sequences while others allocate
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors[0]
    every = [s for mine in issued for s in mine]
    assert len(every) == 16 * 40 * 3 == len(set(every))
    recorded = shard_map.rows("SELECT interface_serial FROM hivenet.interface_calls")
    assert len(recorded) == 16 * 40
    # Each call is recorded on the shard owning its instance, nowhere else.
    assert all(shard_map.shard_for_serial(r["interface_serial"]) == r["shard"]
               for r in recorded)


def test_a_rolled_back_business_transaction_leaves_nothing_on_any_shard(
        conns: list[psycopg.Connection], engines: dict[str, Engine]) -> None:
    shard_map = shard_map_of_three(conns, engines)
    for db in conns:
        db.execute("CREATE TABLE orders (unified_serial text PRIMARY KEY)")
    tenant = "C0001/50"
    with shard_map.begin(tenant) as conn:
        serials = SerialRepository(conn)
        unified = serials.next_unified("C0001", "A01", "50")
        step = serials.next_system("C0001", "A01", "50")
        call = serials.next_interface("C0001", "A01", "50", "C0002")
    with pytest.raises(RuntimeError), shard_map.begin(tenant) as conn:
        conn.execute(text("INSERT INTO orders VALUES (:u)"), {"u": unified})
        InterfaceDedup(conn).claim(call, unified_serial=unified, system_serial=step)
        StepRepository(conn).begin(step, {"amount": 1})
        raise RuntimeError("the business transaction fails")
    for found in shard_map.each(lambda c: [
            c.execute(text("SELECT count(*) FROM orders")).scalar(),
            c.execute(text("SELECT count(*) FROM hivenet.interface_call")).scalar(),
            c.execute(text("SELECT count(*) FROM hivenet.step_attempt")).scalar()]).values():
        assert found == [0, 0, 0]
    # The retry, with the same tenant key, proceeds; on another shard it is refused.
    with shard_map.begin(tenant) as conn:
        InterfaceDedup(conn).claim(call, unified_serial=unified, system_serial=step)
        assert StepRepository(conn).begin(step, {"amount": 1}).started
    with pytest.raises(UnknownScope, match="instance '50'"), \
            shard_map.begin("C0001/90") as conn:
        StepRepository(conn).begin(step, {"amount": 1})


def test_reports_and_call_chains_merge_across_shards(
        conns: list[psycopg.Connection], engines: dict[str, Engine], urls: list[str]) -> None:
    shard_map = shard_map_of_three(conns, engines)
    with shard_map.begin("C0001/03") as conn:
        unified = SerialRepository(conn).next_unified("C0001", "A01", "03")
    calls = {}
    for tenant in ("C0001/03", "C0001/50", "C0001/90"):
        instance = shard_map.instance_of(tenant)
        with shard_map.begin(tenant) as conn:
            call = SerialRepository(conn).next_interface("C0001", "A01", instance, "C0002")
            InterfaceDedup(conn).claim(call, unified_serial=unified)
            calls[call] = shard_map.shard_of(tenant)
    chain = shard_map.call_chain(unified)
    assert [(c["shard"], c["interface_serial"]) for c in chain] == \
        [(s, c) for c, s in calls.items()]
    states = shard_map.rows("SELECT * FROM hivenet.step_states")
    assert {r["shard"] for r in states} == {"s0", "s1", "s2"}
    assert list(states[0]) == ["shard", "state", "steps"]
    shard_map.maintain()
    ran = shard_map.rows("SELECT ran_at FROM hivenet.maintain_run")
    assert [r["shard"] for r in ran] == ["s0", "s1", "s2"]
    plain = from_urls(urls)
    try:
        assert [r["shard"] for r in plain.call_chain(unified)] == [
            {"s0": "shard0", "s1": "shard1", "s2": "shard2"}[s] for s in calls.values()]
    finally:
        plain.dispose()


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    unified_serial: Mapped[str] = mapped_column(String(28), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(20))


def test_sharded_session_routes_orm_objects_by_tenant(
        conns: list[psycopg.Connection], engines: dict[str, Engine]) -> None:
    shard_map = shard_map_of_three(conns, engines)
    for e in engines.values():
        Base.metadata.create_all(e)

    def everywhere(*_args: Any, **_kwargs: Any) -> list[str]:
        return sorted(engines)

    session = ShardedSession(shards=engines,
                             shard_chooser=shard_map.shard_chooser(lambda o: o.tenant),
                             identity_chooser=everywhere, execute_chooser=everywhere)
    with session:
        for tenant in ("C0001/17", "C0001/68"):
            instance = shard_map.instance_of(tenant)
            bind = session.connection(bind_arguments={"shard_id": shard_map.shard_of(tenant)})
            serial = SerialRepository(bind).next_unified("C0001", "A01", instance)
            session.add(Order(unified_serial=serial, tenant=tenant))
        session.commit()
    found = shard_map.rows("SELECT tenant FROM orders")
    assert sorted((r["shard"], r["tenant"]) for r in found) == [
        ("s0", "C0001/17"), ("s2", "C0001/68")]


def test_an_administrator_changes_ownership_and_an_application_reads_it(
        conns: list[psycopg.Connection]) -> None:
    a = conns[0]
    for role in ("hivenet_admin", "hivenet_app"):
        if scalar(a, "SELECT to_regrole(%s) IS NULL", (role,)):
            a.execute(f"CREATE ROLE {role} NOLOGIN")
    a.execute("SELECT hivenet._grant_roles()")
    first = scalar(a, UNIFIED, ("05",))
    a.execute("SELECT hivenet.maintain()")
    a.execute("SET ROLE hivenet_admin")
    a.execute("SELECT hivenet.own_instances('01-04', NULL, true)")
    # A plain UPDATE goes through the same trigger, which restores the parked scope.
    a.execute("UPDATE hivenet.setting SET value = '01-09' WHERE name = 'owned_instances'")
    a.execute("SET ROLE hivenet_app")
    assert scalar(a, "SELECT owned_instances FROM hivenet.ownership()") == "01-09"
    assert scalar(a, UNIFIED, ("05",)) > first
    a.execute("RESET ROLE")


def hivenet_db(*args: str, rc: int = 0) -> subprocess.CompletedProcess[str]:
    result = in_process(*args)
    assert result.returncode == rc, result.stderr
    return result


def test_the_command_declares_ownership_and_reports_and_maintains_across_shards(
        conns: list[psycopg.Connection], urls: list[str], tmp_path: Path) -> None:
    (row,) = json.loads(hivenet_db("migrate", "--owns-instances", "01-33", "--url", urls[0],
                                   "--json").stdout)
    assert row["owned_instances"] == "01-33"
    hivenet_db("migrate", "--owns-instances", "34-66", "--single-primary-formats",
               "--url", urls[1])
    hivenet_db("migrate", "--owns-instances", "67-99", "--url", urls[2])
    assert [tuple(scalar(c, "SELECT (owned_instances, single_primary_formats)::text "
                            "FROM hivenet.ownership()") for c in conns)] == \
        [("(01-33,f)", "(34-66,t)", "(67-99,f)")]
    failed = hivenet_db("migrate", "--owns-instances", "1-9", "--url", urls[0], rc=1)
    assert "HN001" in failed.stderr and "'1-9'" in failed.stderr
    unified = scalar(conns[0], UNIFIED, ("03",))
    calls = []
    for conn, instance in ((conns[2], "70"), (conns[1], "40")):
        call = scalar(conn, "SELECT hivenet.next_interface_serial('C0001', 'A01', %s, "
                            "'C0002')", (instance,))
        conn.execute("SELECT hivenet.claim_interface_serial(%s, %s)", (call, unified))
        calls.append(call)
    report = json.loads(hivenet_db("report", "--shards", ",".join(urls), "--unified", unified,
                                   "--json").stdout)
    chain = report[f"call chain of {unified}"]
    assert [(c["shard"], c["interface_serial"]) for c in chain] == [
        ("shard2", calls[0]), ("shard1", calls[1])]
    assert {r["shard"] for r in report["steps per state"]} == {"shard0", "shard1", "shard2"}
    path = tmp_path / "shards.json"
    path.write_text(json.dumps({"shards": {f"s{i}": u for i, u in enumerate(urls)}}))
    done = json.loads(hivenet_db("maintain", "--shard-map", str(path), "--json").stdout)
    assert [r["shard"] for r in done] == ["s0", "s1", "s2"]
    assert all(scalar(c, "SELECT count(*) FROM hivenet.maintain_run") == 1 for c in conns)
    hivenet_db("maintain", "--shards", urls[0], "--url", urls[0], rc=2)


def test_giving_up_an_instance_while_16_connections_allocate_for_it(
        conns: list[psycopg.Connection], urls: list[str]) -> None:
    """A statement that starts after own_instances commits is refused (HN002); none is
    issued twice, before or after the scope is parked and restored."""
    a = conns[0]
    own(conns, "01-09")
    a.execute("""SELECT hivenet.prepare_scope('unified',
                 '{"system": "C0001", "module": "A01", "instance": "05"}')""")  # the fast path
    workers = [psycopg.connect(urls[0], autocommit=True) for _ in range(16)]
    stop = threading.Event()
    given_up_at: list[float] = []

    def allocate(conn: psycopg.Connection, barrier: threading.Barrier
                 ) -> list[tuple[float, str | None]]:
        done: list[tuple[float, str | None]] = []
        barrier.wait()
        while not stop.is_set():
            started = time.monotonic()
            try:
                done.append((started, scalar(conn, UNIFIED, ("05",))))
            except psycopg.Error as error:
                assert error.diag.sqlstate == "HN002", error
                done.append((started, None))
        return done

    def give_up() -> None:
        time.sleep(0.5)
        a.execute("SELECT hivenet.own_instances('01-04,06-09', NULL, true)")
        given_up_at.append(time.monotonic())
        time.sleep(0.5)
        stop.set()

    changer = threading.Thread(target=give_up)
    changer.start()
    try:
        results = in_parallel(workers, allocate)
    finally:
        changer.join()
        for worker in workers:
            worker.close()
    calls = [r for mine in results for r in mine]
    issued = [s for _, s in calls if s is not None]
    assert len(issued) == len(set(issued)) > 16
    assert not [s for started, s in calls if s is not None and started > given_up_at[0]]
    assert any(s is None for _, s in calls)
    a.execute("SELECT hivenet.own_instances('01-09')")
    assert scalar(a, UNIFIED, ("05",)) > max(issued)
