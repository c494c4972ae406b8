from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator

import psycopg
import pytest

from hivenet_db._execute import SyncDB
from hivenet_db.testing import session_bin_dir
from tests import system_packages
from tests.helpers import ASYNC_KINDS, SYNC_KINDS, sync_connection

pytest_plugins = ["hivenet_db.testing", "pytester"]

# Every server and client tool the suite starts (psql, pg_dump, the servers of the crash,
# failover and shard tests, the commands run as subprocesses) from the PostgreSQL the session
# runs: HIVENET_TEST_PG_BIN when given.
if (_bin_dir := session_bin_dir()) is not None:
    os.environ["HIVENET_PG_BINDIR"] = str(_bin_dir)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Install what the suite needs from the machine when it is missing (as root, with
    apt-get: tests/system_packages.py), so the README's command passes on a fresh machine.
    Once, before pytest-xdist starts its workers (they skip it)."""
    if hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    system_packages.ensure(lambda line: reporter.write_line(f"hivenet-db tests: {line}")
                           if reporter is not None else print(line))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker more than the cores this process may run on. The suite waits as
    much as it computes in places (failover and HA timeouts, a lock another session holds, a
    fake clock's second), and a core left idle while both workers of a 2-core machine wait
    is what a third one takes (README: the suite's time)."""
    return len(os.sched_getaffinity(0)) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of long tests (marked slow) first, then the others by their number of
    tests: pytest-xdist hands out files in this order (``--no-loadscope-reorder``, or it
    would sort them by number of tests alone, putting the slow files, of a few long tests
    each, last), and a long one left for the end would run on one worker while the others
    wait."""
    long_files = {item.path for item in items if item.get_closest_marker("slow")}
    tests_in = Counter(item.path for item in items)
    # stable: a file's tests stay together and in order
    items.sort(key=lambda item: (item.path not in long_files, -tests_in[item.path]))


@pytest.fixture(scope="session")
def hivenet_prepare() -> list[str]:
    """The scopes most tests allocate for, prepared in the template database (a test of
    what an unprepared scope does uses another)."""
    return ["C0001 A01 01-03", "C0002 A01 01-03", "D0001 A01 01-09",
            "id_service merchant=123456789012,shard=01-09", "merchant_trade merchant=123456789012"]


@pytest.fixture
def connect(hivenet_url: str) -> Iterator[Callable[..., psycopg.Connection]]:
    """Open extra raw connections to the test's database (closed after the test)."""
    opened: list[psycopg.Connection] = []

    def _connect(autocommit: bool = True) -> psycopg.Connection:
        conn = psycopg.connect(hivenet_url, autocommit=autocommit)
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()


@pytest.fixture
def db(connect: Callable[..., psycopg.Connection]) -> psycopg.Connection:
    """An autocommit psycopg connection to the test's database."""
    return connect()


@pytest.fixture
def fake_clock(db: psycopg.Connection) -> Callable[[psycopg.Connection, str], None]:
    """Allow the fake clock in this database; returns set(conn, timestamptz literal)."""
    db.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'")

    def _set(conn: psycopg.Connection, when: str) -> None:
        conn.execute("SELECT set_config('hivenet.fake_now', %s, false)", (when,))

    return _set


@pytest.fixture(params=SYNC_KINDS)
def any_conn(request: pytest.FixtureRequest, hivenet_app_url: str) -> Iterator[SyncDB]:
    """The caller's connection, once per kind the repositories accept (SQLAlchemy Connection,
    Session, psycopg Connection), outside autocommit: the test commits or rolls back. As the
    application connects in production: a login granted only hivenet_app."""
    with sync_connection(request.param, hivenet_app_url) as conn:
        yield conn


@pytest.fixture(params=ASYNC_KINDS)
def async_kind(request: pytest.FixtureRequest) -> str:
    """The async connection kinds, opened in the test's event loop with ``async_connection``."""
    if request.param.startswith("sqlalchemy"):
        pytest.importorskip("greenlet", reason="async SQLAlchemy needs the extra hivenet-db[async]")
    return str(request.param)
