"""hivenet-db behind PgBouncer in transaction pooling (SPEC §6): many clients share a few
server sessions, handed from one client to the next after every transaction, so nothing the
library does may rely on session state or on prepared statements of a session."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.orm import Session

from hivenet_db import (
    InterfaceDedup,
    RequestRepository,
    SerialRepository,
    StepRepository,
    parse_serial,
)
from hivenet_db._execute import SyncDB
from hivenet_db.shards import ShardMap
from hivenet_db.tools import scopes
from hivenet_db.tools.embedded_postgres import SUPERUSER, EmbeddedPostgres
from hivenet_db.urls import sqlalchemy_url
from tests.servers import NOTHING_LEFT, left_on_the_session, pgbouncer

THREADS = 16
ITERATIONS = 40
POOL_SIZE = 4  # far fewer server sessions than clients: sessions really are shared
SCOPE = {"system": "P0001", "module": "B01"}


@pytest.fixture(scope="module")
def bouncer_port(hivenet_server: EmbeddedPostgres) -> Iterator[int]:
    """PgBouncer (transaction pooling) in front of the suite's server; stopped afterwards."""
    try:
        with pgbouncer(hivenet_server.port, pool_size=POOL_SIZE, max_clients=4 * THREADS,
                       user=SUPERUSER) as port:
            yield port
    except FileNotFoundError as missing:
        pytest.fail(str(missing))


@pytest.fixture(autouse=True)
def channels(hivenet_url: str) -> None:
    """The channels the clients allocate for, prepared: P0001 B01 01 to 20."""
    scopes.prepare_url(hivenet_url, ["P0001 B01 01-20"])


def _via(url: str, port: int) -> str:
    """The test database's URL, through PgBouncer."""
    dbname = urlsplit(url).path.lstrip("/")
    return f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{dbname}"


def _scalar(conn: psycopg.Connection, sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def _iteration(conn: psycopg.Connection, k: int) -> tuple[list[str], int]:
    """One transaction of the mix: allocate, claim a fresh interface serial, run a step.
    Instances repeat across threads, so several threads race on each scope's first use."""
    fields = {**SCOPE, "instance": f"{k % 20 + 1:02d}"}
    args = (fields["system"], fields["module"], fields["instance"])
    unified = _scalar(conn, "SELECT hivenet.next_unified_serial(%s, %s, %s)", args)
    batch = [r[0] for r in conn.execute(
        "SELECT hivenet.next_serials('system', %s::jsonb, 3)", (json.dumps(fields),))]
    interface = _scalar(conn, "SELECT hivenet.next_interface_serial(%s, %s, %s, 'T0001')",
                        args)
    conn.execute("SELECT hivenet.claim_interface_serial(%s, %s, %s)",
                 (interface, unified, batch[0]))
    system = _scalar(conn, "SELECT hivenet.next_system_serial(%s, %s, %s)", args)
    attempt = _scalar(conn, "SELECT attempt FROM hivenet.begin_step(%s, %s::jsonb)",
                      (system, json.dumps({"k": k})))
    conn.execute("SELECT hivenet.finish_step(%s, %s, true, '{}')", (system, attempt))
    backend = _scalar(conn, "SELECT pg_backend_pid()")
    conn.commit()
    return [unified, *batch, interface, system], backend


def test_sixteen_clients_share_four_sessions_without_errors_or_duplicates(
        hivenet_url: str, bouncer_port: int) -> None:
    url = _via(hivenet_url, bouncer_port)
    # Two connections per client at most (its own, and the one next_durable opens), so the
    # engine's own pool never makes a client wait for another.
    engine = create_engine(sqlalchemy_url(url), connect_args={"prepare_threshold": None},
                           pool_size=2 * THREADS, max_overflow=0)
    serials: list[list[str]] = [[] for _ in range(THREADS)]
    backends: list[set[int]] = [set() for _ in range(THREADS)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def client(t: int) -> None:
        try:
            with psycopg.connect(url, prepare_threshold=None) as conn:
                barrier.wait(timeout=60)
                for k in range(ITERATIONS):
                    issued, backend = _iteration(conn, k)
                    serials[t] += issued
                    backends[t].add(backend)
                    with engine.connect() as sa:
                        durable = SerialRepository(sa).next_durable(
                            "unified", **SCOPE, instance=f"{k % 20 + 1:02d}")
                        sa.commit()
                    serials[t].append(str(durable))
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=client, args=(t,)) for t in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        assert not any(thread.is_alive() for thread in threads), "a client hung"
    finally:
        engine.dispose()

    assert errors == [], errors[:3]
    everything = [s for per_thread in serials for s in per_thread]
    assert len(everything) == THREADS * ITERATIONS * 7
    assert len(set(everything)) == len(everything), "duplicate serials"
    # Transaction pooling really was in force: all clients together met no more server
    # sessions than the pool holds, and clients were handed different sessions over time.
    assert len(set().union(*backends)) <= POOL_SIZE
    assert any(len(seen) > 1 for seen in backends)


def _unprepared_engine(url: str, tmp_path: Path) -> Engine:
    """The engine the operations guide asks for behind the pooler, made by hand."""
    return create_engine(sqlalchemy_url(url), connect_args={"prepare_threshold": None},
                         pool_size=THREADS, max_overflow=0)


def _shard_map_engine(url: str, tmp_path: Path) -> Engine:
    """The engine ShardMap.load(.., prepared=False) makes for a shard behind the pooler."""
    path = tmp_path / "shards.json"
    path.write_text(json.dumps({"shards": {"s0": url},
                                "tenants": {"t": {"instance": "01", "shard": "s0"}}}))
    return ShardMap.load(path, prepared=False).engine_of("t")


@pytest.mark.parametrize("made_by", [_unprepared_engine, _shard_map_engine],
                         ids=["by_hand", "shard_map"])
def test_the_repositorys_hot_path_in_sessions_behind_transaction_pooling(
        hivenet_url: str, bouncer_port: int, tmp_path: Path,
        made_by: Callable[[str, Path], Engine]) -> None:
    """The calls go to the driver as they are (hivenet_db._execute.rows): with
    prepare_threshold=None they are never prepared, so Sessions handed a different server
    session at every transaction, each calling more often than psycopg's threshold, work."""
    engine = made_by(_via(hivenet_url, bouncer_port), tmp_path)
    serials: list[str] = []
    errors: list[BaseException] = []

    def client(t: int) -> None:
        try:
            with Session(engine) as session:
                repo = SerialRepository(session)
                for k in range(ITERATIONS):
                    instance = f"{(t + k) % 20 + 1:02d}"
                    serials.append(repo.next_unified(SCOPE["system"], SCOPE["module"], instance))
                    serials.append(repo.next_system(SCOPE["system"], SCOPE["module"], instance))
                    session.commit()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=client, args=(t,)) for t in range(THREADS)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
    finally:
        engine.dispose()
    assert errors == [], errors[:3]
    assert len(serials) == THREADS * ITERATIONS * 2 == len(set(serials))


def _the_librarys_calls(db: SyncDB, rounds: int) -> None:
    """Allocation, a claim, a step and a keyed request through the repositories, each call
    ``rounds`` times, a transaction a round."""
    for k in range(rounds):
        serials = SerialRepository(db)
        unified = serials.next_unified("P0001", "B01", "01")
        system = serials.next_system("P0001", "B01", "01")
        InterfaceDedup(db).claim(serials.next_interface("P0001", "B01", "01", "T0001"), unified)
        StepRepository(db).run(system, {"k": k}, lambda: {"done": True})
        RequestRepository(db).run("pooled", f"key-{uuid.uuid4()}", {"k": k}, lambda: {"ok": 1})
        assert parse_serial(unified, db=db).format == "unified"
        db.commit()


def test_the_librarys_calls_leave_nothing_on_the_pooled_session(
        hivenet_server: EmbeddedPostgres, hivenet_url: str) -> None:
    """The repositories on a Session and on a psycopg connection that do not prepare
    (``prepare_threshold=None``), each call run more often than psycopg's threshold (5),
    through one pooled server session: it holds nothing of theirs afterwards. On a connection
    that prepares (psycopg's default), they are prepared as its own statements are: the
    setting the docs ask for behind a transaction pooler."""
    with pgbouncer(hivenet_server.port, pool_size=1, user=SUPERUSER) as port:
        url = _via(hivenet_url, port)
        session_pid = left_on_the_session(url)["pid"]
        engine = create_engine(sqlalchemy_url(url), connect_args={"prepare_threshold": None})
        try:
            with Session(engine) as session:
                _the_librarys_calls(session, 8)
        finally:
            engine.dispose()
        with psycopg.connect(url, prepare_threshold=None) as conn:
            _the_librarys_calls(conn, 8)
        assert left_on_the_session(url) == {**NOTHING_LEFT, "pid": session_pid}
        with psycopg.connect(url) as conn:
            _the_librarys_calls(conn, 8)
        assert left_on_the_session(url)["prepared"]
