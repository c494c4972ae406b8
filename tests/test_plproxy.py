"""`hivenet-db proxy install` (docs/guides/plproxy.md): a PL/Proxy database in front of two
shards, each a server of its own started here. Calls through the proxy reach the shard
that owns the instance (or the key's hash), HN codes arrive as the same Python exceptions, and
each call commits on its own on the shard: that caveat is shown here, not hidden.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hivenet_db import InterfaceDedup, SerialRepository, StepRepository, errors
from hivenet_db.dedup import ClaimRepository
from hivenet_db.testing import scratch_dir
from hivenet_db.tools import migrate, plproxy
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres
from tests.helpers import scalar, share_fallback
from tests.system_packages import packaged_major

OWNS = ["01-49", "50-98"]  # 00 and 99 belong to no shard
PASSWORD = "pr0xy-test-s3cret"  # in the shard URLs given to install: trust ignores it


@dataclass
class Cluster:
    shards: list[str]  # the shards' URLs (superuser, no password)
    proxy_db: str  # the proxy database's URL
    owns: list[str] | None  # --owns, for shards whose schema has no ownership setting
    log: list[str]  # progress messages of the fixture's install

    def install(self, log: list[str] | None = None, password: bool = False) -> list[plproxy.Shard]:
        urls = [u.replace("postgres@", f"postgres:{PASSWORD}@") if password else u
                for u in self.shards]
        return plproxy.install(self.proxy_db, urls, owns=self.owns,
                             progress=(log if log is not None else self.log).append)


def _plproxy_available(server: EmbeddedPostgres) -> tuple[bool, str]:
    """Whether the server can create the extension, and the package that brings it."""
    with psycopg.connect(server.url(), autocommit=True) as conn:
        found = conn.execute("SELECT FROM pg_available_extensions WHERE name = 'plproxy'"
                             ).fetchone() is not None
        return found, plproxy.apt_package(conn.info.server_version // 10000)


def _install_plproxy_package(package: str) -> str | None:
    """apt-get install the package (as .ci/run does) when we may; None, or why not."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "not root or no apt-get"
    result = subprocess.run(["apt-get", "install", "-y", "-q", package],
                            capture_output=True, text=True, check=False, timeout=600,
                            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return None if result.returncode == 0 else (result.stderr or result.stdout)[-300:]


def _declare_ownership(url: str, owned: str, single: bool) -> bool:
    """own_instances on a shard whose schema has it (issue 16 part 1); False without it."""
    with psycopg.connect(url, autocommit=True) as conn:
        if scalar(conn, "SELECT to_regprocedure('hivenet.own_instances(text,boolean,boolean)')"
                  ) is None:
            return False
        conn.execute("SELECT hivenet.own_instances(%s, %s)", (owned, single))
        return True


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="hivenet-plproxy-", dir=scratch_dir()))
    os.chmod(root, 0o755)
    servers = [EmbeddedPostgres(root=root / name, fsync=False) for name in ("s0", "s1", "px")]
    try:
        for server in servers:
            server.start()
        found, package = _plproxy_available(servers[2])
        if not found and packaged_major(servers[2].binaries) is None:
            pytest.skip(f"PL/Proxy is not in this server ({servers[2].binaries}): it comes from "
                        "Debian's packages, for Debian's servers only")
        if not found:
            why = _install_plproxy_package(package)
            if why is not None or not _plproxy_available(servers[2])[0]:
                pytest.skip(f"PL/Proxy is not installed and could not be: apt-get install "
                            f"{package} ({why})")
        shards = [servers[i].ensure_database("hivenet") for i in (0, 1)]
        for url in shards:
            migrate.upgrade(url)
            # Any scope the tests name draws from its format's shared fallback (promoted by
            # maintain()): the tests route scopes, they do not prepare them.
            with psycopg.connect(url, autocommit=True) as conn:
                share_fallback(conn, "id_service", "interface", "merchant_trade", "system",
                               "unified", promote=True)
        declared = [_declare_ownership(url, OWNS[i], i == 0) for i, url in enumerate(shards)]
        made = Cluster(shards, servers[2].ensure_database("proxy"),
                       None if all(declared) else OWNS, [])
        made.install()
        yield made
    finally:
        for server in servers:
            server.remove()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def via_proxy(cluster: Cluster) -> Iterator[psycopg.Connection]:
    """The caller: a connection to the proxy database, outside autocommit."""
    with psycopg.connect(cluster.proxy_db) as conn:
        yield conn


def on_shard(cluster: Cluster, number: int, sql: str, params: Any = None) -> Any:
    with psycopg.connect(cluster.shards[number], autocommit=True) as conn:
        return scalar(conn, sql, params)


def scopes_on(cluster: Cluster, number: int, format: str, scope: str) -> int:
    """How many counter scopes ``format``/``scope`` shard ``number`` has used (0 or 1)."""
    return int(on_shard(cluster, number, """
        SELECT count(*) FROM (SELECT format, scope FROM hivenet.scope
                              UNION SELECT format, scope FROM hivenet.fallback_draw) AS s
        WHERE format = %s AND scope = %s""", (format, scope)))


def test_install_reports_each_shard_and_what_it_owns(cluster: Cluster) -> None:
    log = "\n".join(cluster.log)
    for number, owned in enumerate(OWNS):
        assert f"shard {number}: " in log and f"owns instances {owned}" in log, log
        assert f"shard {number} answers through the proxy" in log, log
    with psycopg.connect(cluster.proxy_db) as conn:
        # two shards: two partitions; instances routed to their owners only
        assert scalar(conn, "SELECT count(*) FROM pg_options_to_table((SELECT srvoptions "
                            "FROM pg_foreign_server WHERE srvname = 'hivenet_shards'))") == 2
        owners: dict[str, int] = dict(conn.execute(
            "SELECT instance, shard FROM hivenet_proxy.owner").fetchall())
    assert len(owners) == 98 and owners["01"] == 0 and owners["49"] == 0
    assert owners["50"] == 1 and owners["98"] == 1 and "00" not in owners


def test_a_serial_allocated_through_the_proxy_comes_from_the_owning_shard(
        cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    serials = SerialRepository(via_proxy)
    low = [serials.next_unified("R0001", "A01", "07") for _ in range(3)]
    high = serials.next_many("system", 2, system="R0001", module="A01", instance="77")
    via_proxy.rollback()  # changes nothing: each call committed on its shard (docs)
    # the owner's counter for the scope goes on from there
    assert int(on_shard(cluster, 0, "SELECT hivenet.next_unified_serial('R0001', 'A01', '07')"
                        )[-10:]) > low[-1].seq > low[0].seq
    assert int(on_shard(cluster, 1, "SELECT hivenet.next_system_serial('R0001', 'A01', '77')"
                        )[-12:]) > high[-1].seq > high[0].seq
    # and the other shard refuses the scope (its first use there is checked)
    for number, sql in ((1, "SELECT hivenet.next_unified_serial('R0001', 'A01', '07')"),
                        (0, "SELECT hivenet.next_system_serial('R0001', 'A01', '77')")):
        with pytest.raises(psycopg.Error) as refused:
            on_shard(cluster, number, sql)
        assert refused.value.sqlstate == "HN002"


def test_every_allocation_through_the_proxy_flushes_its_commit_on_the_shard(
        cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    """Each call commits on the shard before the caller sees the serial; the shard flushes
    that commit only if it has a transaction id and wrote WAL, which drawing a serial alone
    does not do: each call runs flush_at_commit() there (a transaction id each, and the WAL
    record of sequence durable_mark; tests/test_crash.py shows why for next_durable)."""
    next_xid = "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
    before = on_shard(cluster, 0, next_xid)
    wal = "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"
    wal_before = on_shard(cluster, 0, wal)
    calls = ["SELECT hivenet.next_unified_serial('R0001', 'A01', '08')",
             "SELECT hivenet.next_system_serial('R0001', 'A01', '08')",
             "SELECT hivenet.next_interface_serial('R0001', 'A01', '08', 'T0001')",
             "SELECT hivenet.next_serial('unified', '{\"system\": \"R0001\", "
             "\"module\": \"A01\", \"instance\": \"08\"}')",
             "SELECT hivenet.next_serials('unified', '{\"system\": \"R0001\", "
             "\"module\": \"A01\", \"instance\": \"08\"}', 3)"]
    for _ in range(2):
        for call in calls:
            assert via_proxy.execute(call).fetchall()
    via_proxy.rollback()
    # nextval itself takes one only when it logs a new range, every 32 values at most
    assert on_shard(cluster, 0, next_xid) - before >= 2 * len(calls)
    assert on_shard(cluster, 0, wal) > wal_before


def test_formats_without_a_node_field_go_to_the_single_primary(
        cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    made = SerialRepository(via_proxy).next("merchant_trade", merchant="600000000001")
    assert made.merchant == "600000000001"
    assert (scopes_on(cluster, 0, "merchant_trade", "600000000001"),
            scopes_on(cluster, 1, "merchant_trade", "600000000001")) == (1, 0)


def test_an_interface_claim_lands_on_the_owner_and_a_second_gets_hn020(
        cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    serial = SerialRepository(via_proxy).next_interface("R0002", "A01", "60", "T0001")
    dedup = InterfaceDedup(via_proxy)
    dedup.claim(serial)
    with pytest.raises(errors.DuplicateInterfaceSerial) as caught:
        dedup.claim(serial)
    assert serial in str(caught.value)
    via_proxy.rollback()
    recorded = "SELECT count(*) FROM hivenet.interface_calls WHERE interface_serial = %s"
    assert on_shard(cluster, 1, recorded, (serial,)) == 1
    assert on_shard(cluster, 0, recorded, (serial,)) == 0


def test_call_chain_through_the_proxy_merges_the_shards(
        cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    serials = SerialRepository(via_proxy)
    unified = serials.next_unified("R0003", "A01", "02")
    calls = [serials.next_interface("R0003", "A01", instance, "T0001")
             for instance in ("03", "93")]
    for serial in calls:
        InterfaceDedup(via_proxy).claim(serial, unified_serial=unified)
    chain = InterfaceDedup(via_proxy).call_chain(unified)
    assert sorted(c.interface_serial for c in chain) == sorted(calls)


def test_steps_begin_and_finish_through_the_proxy(
        cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    serial = SerialRepository(via_proxy).next_system("R0004", "A01", "88")
    steps = StepRepository(via_proxy)
    start = steps.begin(serial, {"amount": 5})
    assert start.started and start.attempt == 1
    via_proxy.commit()
    with pytest.raises(errors.StepInProgress):
        steps.begin(serial, {"amount": 5})
    via_proxy.rollback()  # the proxy's own transaction failed with the call
    steps.finish(serial, start.attempt, True, {"paid": True})
    again = steps.begin(serial, {"amount": 5})
    assert again.replayed and again.response == {"paid": True}
    with pytest.raises(errors.RequestMismatch):
        steps.begin(serial, {"amount": 6})
    via_proxy.rollback()
    state = "SELECT state::text FROM hivenet.step_attempt WHERE system_serial = %s"
    assert on_shard(cluster, 1, state, (serial,)) == "success"
    assert on_shard(cluster, 0, "SELECT count(*) FROM hivenet.step_attempt "
                                "WHERE system_serial = %s", (serial,)) == 0


def test_hn_codes_pass_through_as_the_same_exceptions(
        cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    serials = SerialRepository(via_proxy)
    with pytest.raises(errors.InvalidInput) as bad:  # raised by the shard
        serials.next_unified("R0005", "A1", "07")
    assert "'A1'" in str(bad.value)
    via_proxy.rollback()
    for instance in ("00", "99"):  # owned by no shard: raised by the proxy
        with pytest.raises(errors.UnknownScope) as unowned:
            serials.next_unified("R0005", "A01", instance)
        assert f"instance '{instance}' is owned by no shard" in str(unowned.value)
        via_proxy.rollback()
    claims = ClaimRepository(via_proxy)
    claims.claim("orders", "R0005-1")
    with pytest.raises(errors.DuplicateClaim):
        claims.claim("orders", "R0005-1")
    via_proxy.rollback()


@pytest.mark.parametrize(("call", "shard"), [
    (lambda db: SerialRepository(db).next_unified("R0005", "A1", "07"), 0),
    (lambda db: SerialRepository(db).next("system", system="R0005", module="A01",
                                          instance="7"), 0),  # malformed: shard 0 answers
    (lambda db: InterfaceDedup(db).claim("R0005"), 0),
    (lambda db: StepRepository(db).begin("R0005A0160" + "9" * 20), 1),
    (lambda db: StepRepository(db).finish("R0005A0161" + "1" * 20, 1, True), 1),
], ids=["bad-module", "bad-instance", "short-serial", "bad-step-date", "unknown-attempt"])
def test_an_error_through_the_proxy_is_the_shards_own(
        cluster: Cluster, via_proxy: psycopg.Connection, call: Any, shard: int) -> None:
    """The same exception class and message as calling the shard directly."""
    with psycopg.connect(cluster.shards[shard]) as direct, \
            pytest.raises(errors.HivenetError) as expected:
        call(direct)
    with pytest.raises(errors.HivenetError) as got:
        call(via_proxy)
    assert type(got.value) is type(expected.value)
    assert str(expected.value).splitlines()[0] in str(got.value)


def test_a_claim_key_goes_to_its_hash_shard(cluster: Cluster,
                                            via_proxy: psycopg.Connection) -> None:
    keys = [f"order-{i}" for i in range(8)]
    for key in keys:
        ClaimRepository(via_proxy).claim("hash", key)
    for key in keys:
        shard = plproxy.shard_of_key(key, 2)
        taken = "SELECT count(*) FROM hivenet.claim_record WHERE namespace = 'hash' AND key = %s"
        assert (on_shard(cluster, shard, taken, (key,)),
                on_shard(cluster, 1 - shard, taken, (key,))) == (1, 0), key


def test_a_claim_through_the_proxy_survives_the_callers_rollback(
        cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    """The caveat of docs/guides/plproxy.md: the shard committed the claim and the step on its own,
    so rolling back the caller's transaction does not undo them. On one primary the retry
    below would succeed (SPEC §3: the claim vanishes with the rollback)."""
    serial = SerialRepository(via_proxy).next_interface("R0006", "A01", "12", "T0001")
    step = SerialRepository(via_proxy).next_system("R0006", "A01", "62")
    via_proxy.commit()
    InterfaceDedup(via_proxy).claim(serial)
    assert StepRepository(via_proxy).begin(step).started
    via_proxy.rollback()  # the business transaction fails

    with pytest.raises(errors.DuplicateInterfaceSerial):  # the retry is refused
        InterfaceDedup(via_proxy).claim(serial)
    via_proxy.rollback()
    with pytest.raises(errors.StepInProgress):  # the step stayed processing
        StepRepository(via_proxy).begin(step)
    via_proxy.rollback()
    assert on_shard(cluster, 1, "SELECT state::text FROM hivenet.step_attempt "
                                "WHERE system_serial = %s", (step,)) == "processing"


def test_install_is_idempotent(cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    before = scalar(via_proxy, "SELECT hivenet.next_unified_serial('R0007', 'A01', '55')")
    via_proxy.commit()
    log: list[str] = []
    shards = cluster.install(log)
    assert [s.owned for s in shards] == OWNS
    # the open session routes as before, and the counters went on
    after = scalar(via_proxy, "SELECT hivenet.next_unified_serial('R0007', 'A01', '55')")
    assert int(after[-10:]) == int(before[-10:]) + 1
    with psycopg.connect(cluster.proxy_db) as conn:
        assert scalar(conn, "SELECT count(*) FROM hivenet_proxy.shard") == 2
        assert scalar(conn, "SELECT count(*) FROM pg_foreign_server") == 1
        assert scalar(conn, "SELECT count(*) FROM pg_user_mappings") == 1


#: Each function of schema hivenet: its argument names and types, in order.
ARGUMENTS = """
    SELECT p.proname, p.proargnames[:p.pronargs], p.proargtypes::regtype[]::text[]
    FROM pg_proc p WHERE p.pronamespace = 'hivenet'::regnamespace AND p.proname !~ '^_'"""


def test_every_proxy_function_answers_to_the_shards_parameter_names(cluster: Cluster) -> None:
    """Named notation through the proxy as on a shard (SPEC §8): the same names and types,
    in order (a shard's function may have optional parameters more at the end)."""
    with psycopg.connect(cluster.proxy_db) as proxy, \
            psycopg.connect(cluster.shards[0]) as shard:
        proxied = proxy.execute(ARGUMENTS).fetchall()
        on_shard = {name: (names, types) for name, names, types in shard.execute(ARGUMENTS)}
    assert len(proxied) > 10, proxied
    for name, names, types in proxied:
        assert (names, types) == tuple(a[:len(names)] for a in on_shard[name]), name


def test_install_again_renames_the_parameters_of_an_older_proxy(
        cluster: Cluster, via_proxy: psycopg.Connection) -> None:
    """A proxy installed when the parameters were named p_...: CREATE OR REPLACE cannot rename
    them, so install drops those functions first; then a named call works."""
    with psycopg.connect(cluster.proxy_db, autocommit=True) as conn:
        conn.execute("DROP FUNCTION hivenet.claim(text, text, boolean)")
        conn.execute("""CREATE FUNCTION hivenet.claim(p_namespace text, p_key text,
                            p_nowait boolean DEFAULT false) RETURNS void
                        LANGUAGE plproxy AS $$
                            CLUSTER 'hivenet_shards';
                            RUN ON hivenet_proxy.partition_of_key(p_key);
                        $$""")
    cluster.install([])
    via_proxy.execute("SELECT hivenet.claim(namespace => 'named', key => 'k-1', nowait => true)")
    via_proxy.commit()
    shard = plproxy.shard_of_key("k-1", 2)
    assert on_shard(cluster, shard, "SELECT count(*) FROM hivenet.claim_record "
                                    "WHERE namespace = 'named' AND key = 'k-1'") == 1


def test_no_password_is_shown_or_stored(cluster: Cluster) -> None:
    log: list[str] = []
    cluster.install(log, password=True)
    assert log and not [line for line in log if PASSWORD in line]
    with psycopg.connect(cluster.proxy_db) as conn:
        stored = scalar(conn, """
            SELECT concat_ws(' ', (SELECT string_agg(connstr || label, ' ')
                                   FROM hivenet_proxy.shard),
                             (SELECT srvoptions::text FROM pg_foreign_server),
                             (SELECT string_agg(coalesce(umoptions::text, ''), ' ')
                              FROM pg_user_mappings))""")
    assert "127.0.0.1" in stored and PASSWORD not in stored and "user=" not in stored


def test_install_refuses_overlapping_owners_and_a_shard_as_proxy(cluster: Cluster) -> None:
    if cluster.owns is not None:
        with pytest.raises(plproxy.ProxyError, match="instance 40 is owned by shard 0"):
            plproxy.install(cluster.proxy_db, cluster.shards, owns=["01-49", "40-98"])
    with pytest.raises(plproxy.ProxyError, match="holds the hivenet schema of a shard"):
        plproxy.install(cluster.shards[0], cluster.shards, owns=cluster.owns)


def test_the_bench_case_runs_on_these_servers(cluster: Cluster, tmp_path: Path) -> None:
    """hivenet_db.bench.scale_out's rounds (one short round, its scripts and the three ways),
    with a database of shard 0's server as the one primary."""
    from hivenet_db.bench import scale_out

    with psycopg.connect(cluster.shards[0], autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench_primary")
    primary = cluster.shards[0].rsplit("/", 1)[0] + "/bench_primary"
    migrate.upgrade(primary)
    scale_out._prepare(primary, 1, 98)  # as the bench prepares its one primary
    said: list[str] = []
    results = scale_out._rounds(tmp_path, "claim", 1, 1, 2, said.append, primary,
                                (cluster.shards[0], cluster.shards[1]), cluster.proxy_db)
    assert [r.scenario for r in results] == ["scale_out_claim_app_map",
                                             "scale_out_claim_plproxy"]
    assert all(r.baseline_tps[0] > 0 and r.candidate_tps[0] > 0 for r in results), said


def test_the_command_installs_and_shows_no_password(
        cluster: Cluster, capsys: pytest.CaptureFixture[str]) -> None:
    from hivenet_db import cli

    shards = ",".join(u.replace("postgres@", f"postgres:{PASSWORD}@") for u in cluster.shards)
    owns = [a for o in cluster.owns or [] for a in ("--owns", o)]
    assert cli.main(["proxy", "install", "--shards", shards, *owns, "--url", cluster.proxy_db,
                     "--json"]) == 0
    out, err = capsys.readouterr()
    assert PASSWORD not in out + err
    shown = json.loads(out)
    assert [(s["shard"], s["owns"]) for s in shown] == [(0, OWNS[0]), (1, OWNS[1])]
    assert "shard 1 answers through the proxy" in err

    # a shard that cannot be reached: one line, exit status 2, still no password
    dead = cluster.shards[1].replace("postgres@", f"postgres:{PASSWORD}@").rsplit(":", 1)[0] \
        + ":1/hivenet"
    assert cli.main(["proxy", "install", "--shards", f"{shards.split(',')[0]},{dead}", *owns,
                     "--url", cluster.proxy_db]) == 2
    out, err = capsys.readouterr()
    assert "cannot connect to shard 127.0.0.1:1/hivenet" in err.strip().splitlines()[-1], err
    assert PASSWORD not in out + err
