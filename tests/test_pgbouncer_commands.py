"""Every ``hivenet-db`` command that connects, run three times through a real PgBouncer in
transaction pooling with ONE server session: each run gets the session the runs before it
used, so whatever one leaves there (a prepared statement, a temporary function, a LISTEN, a
session setting) the next one meets, and the next client of the application too. After each
command's runs the session is looked at: nothing of theirs is left."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg.types.json import Jsonb

from hivenet_db.tools.embedded_postgres import SUPERUSER, EmbeddedPostgres
from tests.command import in_process
from tests.servers import NOTHING_LEFT, left_on_the_session, pgbouncer
from tests.test_cli import SCOPE
from tests.test_cli_errors import SERIAL

RUNS = 3

Via = Callable[[str], str]


@pytest.fixture(scope="module")
def bouncer_port(hivenet_server: EmbeddedPostgres) -> Iterator[int]:
    """PgBouncer in transaction pooling with a single server session per database."""
    try:
        with pgbouncer(hivenet_server.port, pool_size=1, user=SUPERUSER) as port:
            yield port
    except FileNotFoundError as missing:
        pytest.fail(str(missing))


@pytest.fixture
def via(bouncer_port: int) -> Via:
    """A database's URL (on the suite's server), through PgBouncer."""
    def _via(url: str) -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{bouncer_port}{urlsplit(url).path}"
    return _via


@pytest.fixture
def superuser(hivenet_server: EmbeddedPostgres) -> Iterator[psycopg.Connection]:
    with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
        yield conn


def three_runs(url: str | None, *args: str, rc: int = 0, shards: tuple[str, ...] = ()
               ) -> list[subprocess.CompletedProcess[str]]:
    """Run the command RUNS times with ``--url url`` (through PgBouncer; None: its
    ``--shards`` name the databases), each exiting ``rc``, and check that the pooled session
    the runs shared in each database holds nothing of theirs."""
    sessions = (*([url] if url else []), *shards)
    before = [left_on_the_session(session)["pid"] for session in sessions]
    results = []
    for n in range(RUNS):
        result = in_process(*args, *(["--url", url] if url else []))
        assert result.returncode == rc, f"run {n + 1} of {args}: {result.stderr}"
        results.append(result)
    after = [left_on_the_session(session) for session in sessions]
    assert after == [{**NOTHING_LEFT, "pid": pid} for pid in before], args
    return results


def _chained_namespace(url: str) -> None:
    """Namespace payouts with an audit chain of one finished attempt."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT hivenet.set_namespace_policy('payouts', audit_chain => true)")
        conn.execute("SELECT hivenet.begin_request('payouts', 'po-1', '{\"amount\": 5}')")
        conn.execute("SELECT hivenet.finish_request('payouts', 'po-1', 1, true, '{}')")


# Each command on a database at head: its arguments, and what its output shows when it did
# its work.
COMMANDS: dict[str, tuple[list[str], str]] = {
    "migrate --check": (["migrate", "--check"], "is at head"),
    "migrate": (["migrate"], "revision"),
    "migrate --time-zone": (["migrate", "--time-zone", "Asia/Shanghai"], "Asia/Shanghai"),
    "migrate --owns-instances": (["migrate", "--owns-instances", "all"], "all"),
    "prepare": (["prepare", "system=C0001,module=A01,instance=01",
                 "system=C0001,module=A01,instance=02"], "unified"),
    "next": (["next", "unified", *SCOPE, "-n", "12"], "C0001A0101"),
    "parse": (["parse", SERIAL], "0123456789"),
    "report": (["report"], "business time zone"),
    "report --unified": (["report", "--unified", SERIAL], f"call chain of {SERIAL}"),
    "metrics": (["metrics"], "hivenet_"),
    "maintain": (["maintain"], "done"),
    "failover-fence": (["failover-fence", "--gap", "10", "--force"], "now"),
    "audit verify": (["audit", "verify", "payouts"], "chain of 1 attempts intact"),
    "demo": (["demo"], "Example 2"),
}


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_three_times_through_one_pooled_session(
        name: str, hivenet_url: str, via: Via) -> None:
    args, shown = COMMANDS[name]
    if name == "audit verify":
        _chained_namespace(hivenet_url)
    for result in three_runs(via(hivenet_url), *args):
        assert shown in result.stdout, (name, result.stdout)


def test_next_issues_new_serials_on_everyin_process(hivenet_url: str, via: Via) -> None:
    runs = three_runs(via(hivenet_url), "next", "unified", *SCOPE, "-n", "12")
    serials = [line for result in runs for line in result.stdout.split()]
    assert len(serials) == len(set(serials)) == RUNS * 12


def test_install_upgrade_and_downgrade_through_one_pooled_session(
        hivenet_server: EmbeddedPostgres, superuser: psycopg.Connection, via: Via) -> None:
    """bootstrap (a superuser's), migrate from nothing and downgrade: each a transaction of
    DDL, which transaction pooling keeps whole."""
    name = "hivenet_pooled_install"
    hivenet_server.drop_database(name)
    url = via(hivenet_server.ensure_database(name))
    superuser.execute("DROP ROLE IF EXISTS hivenet_pooled_owner")
    superuser.execute("CREATE ROLE hivenet_pooled_owner LOGIN")
    try:
        bootstrapped = three_runs(url, "bootstrap", "--owner", "hivenet_pooled_owner")
        assert "ran: GRANT CREATE ON DATABASE" in bootstrapped[0].stdout
        assert "nothing to do" in bootstrapped[2].stdout
        three_runs(url, "migrate", "--check", rc=5)  # not installed
        three_runs(url, "migrate")
        three_runs(url, "migrate", "--check")
        three_runs(url, "downgrade", "0001")
        three_runs(url, "migrate", "--check", rc=3)  # behind
        three_runs(url, "downgrade", "base")
        three_runs(url, "migrate", "--check", rc=5)
    finally:
        hivenet_server.drop_database(name)
        superuser.execute("DROP OWNED BY hivenet_pooled_owner")
        superuser.execute("DROP ROLE hivenet_pooled_owner")


@pytest.fixture
def shards(hivenet_server: EmbeddedPostgres, hivenet_template: str,
           superuser: psycopg.Connection) -> Iterator[list[str]]:
    """Two shards at head owning 01-49 and 50-99, on the suite's server."""
    names = ["hivenet_pooled_shard0", "hivenet_pooled_shard1"]
    for name, owned in zip(names, ("01-49", "50-99"), strict=True):
        hivenet_server.drop_database(name)
        superuser.execute(f"CREATE DATABASE {name} TEMPLATE {hivenet_template}")
        with psycopg.connect(hivenet_server.url(name), autocommit=True) as conn:
            conn.execute("SELECT hivenet.own_instances(%s)", (owned,))
    yield [hivenet_server.url(name) for name in names]
    for name in names:
        hivenet_server.drop_database(name)


def test_the_commands_over_shards_through_one_pooled_session_each(
        shards: list[str], via: Via) -> None:
    pooled = tuple(via(url) for url in shards)
    for command in (["report", "--json"], ["maintain"]):
        for result in three_runs(None, *command, "--shards", ",".join(pooled),
                                 shards=pooled):
            assert "shard1" in result.stdout, result.stdout


def test_proxy_install_through_one_pooled_session(
        hivenet_server: EmbeddedPostgres, shards: list[str], via: Via) -> None:
    """The proxy's database and the shards, all through PgBouncer (PL/Proxy connects to the
    shards through it too)."""
    with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
        if conn.execute("SELECT FROM pg_available_extensions WHERE name = 'plproxy'"
                        ).fetchone() is None:
            pytest.skip("PL/Proxy is not installed (tests/test_plproxy.py installs it)")
    name = "hivenet_pooled_proxy"
    hivenet_server.drop_database(name)
    proxy = via(hivenet_server.ensure_database(name))
    try:
        pooled = ",".join(via(url) for url in shards)
        for result in three_runs(proxy, "proxy", "install", "--shards", pooled):
            assert "answers through the proxy" in result.stderr
        with psycopg.connect(shards[1], autocommit=True) as conn:  # the shard owning 55
            conn.execute("SELECT hivenet.prepare_scope('unified', %s)",
                         (Jsonb({"system": "C0001", "module": "A01", "instance": "55"}),))
        with psycopg.connect(proxy, autocommit=True, prepare_threshold=None) as conn:
            row = conn.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '55')"
                               ).fetchone()
        assert row is not None and row[0].startswith("C0001A0155")
    finally:
        hivenet_server.drop_database(name)


def test_bench_says_it_needs_postgresql_itself(hivenet_url: str, via: Via) -> None:
    """The one command that may not go through a pooler: it measures PostgreSQL."""
    for result in three_runs(via(hivenet_url), "bench", "--check", rc=1):
        assert "goes through a connection pooler" in result.stderr
        assert "give the URL of the server itself" in result.stderr
