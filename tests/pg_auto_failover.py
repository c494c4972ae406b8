"""A pg_auto_failover formation (Debian's postgresql-<major>-auto-failover): a monitor and two
nodes on loopback ports of their own, run as the server's user, started and stopped by the
test. The monitor is set to act within seconds (health checks every second), so a failover
takes about ten; the nodes replicate synchronously, pg_auto_failover's default, unless made
asynchronous (``asynchronous``)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from hivenet_db.tools.embedded_postgres import _free_port, find_bin_dir
from hivenet_db.tools.proc_stat import stat
from tests.system_packages import packaged_major

DBNAME = "app"
# The monitor acts within seconds (pgautofailover.* settings, in milliseconds).
MONITOR_SETTINGS = {
    "health_check_period": 1000, "health_check_timeout": 2000, "health_check_max_retries": 1,
    "health_check_retry_delay": 500, "node_considered_unhealthy_timeout": 5000,
    "primary_demote_timeout": 3000,
}
# Small nodes: nothing of them outlives the test.
NODE_SETTINGS = {"fsync": "off", "max_wal_size": "'256MB'", "wal_keep_size": "'256MB'"}


def missing() -> str | None:
    """Why a formation cannot run here, or None."""
    major = packaged_major(find_bin_dir())
    if major is None:
        return (f"pg_auto_failover comes from Debian's packages, for Debian's servers only; "
                f"this one is {find_bin_dir()}")
    if shutil.which("pg_autoctl") is None or not Path(
            f"/usr/share/postgresql/{major}/extension/pgautofailover.control").is_file():
        return (f"pg_auto_failover for PostgreSQL {major} is not installed (apt-get install "
                f"postgresql-{major}-auto-failover; the suite installs it when run as root)")
    return None


@dataclass
class Formation:
    root: Path
    ports: dict[str, int] = field(default_factory=dict)
    running: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def _account(self) -> pwd.struct_passwd | None:
        return pwd.getpwnam(os.environ.get("HIVENET_EMBEDDED_USER", "postgres")) \
            if os.geteuid() == 0 else None

    def _env(self) -> dict[str, str]:
        bindir = find_bin_dir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        home = str(self.root)
        return {**env, "PATH": f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}",
                "PG_CONFIG": str(bindir / "pg_config"), "HOME": home, "LC_ALL": "C.UTF-8",
                "XDG_CONFIG_HOME": f"{home}/config", "XDG_DATA_HOME": f"{home}/data",
                "XDG_RUNTIME_DIR": f"{home}/run"}

    def _as_server_user(self) -> dict[str, Any]:
        account = self._account
        return {} if account is None else {"user": account.pw_uid, "group": account.pw_gid,
                                           "extra_groups": []}

    def autoctl(self, *args: str) -> str:
        # errors="replace": pg_autoctl 2.0 may echo a monitor's error about bytes of its own
        result = subprocess.run(["pg_autoctl", *args], capture_output=True, text=True,
                                errors="replace", env=self._env(), cwd=self.root, check=False,
                                **self._as_server_user())
        if result.returncode != 0:
            raise RuntimeError(f"pg_autoctl {' '.join(args)} failed:\n{result.stderr[-3000:]}")
        return str(result.stdout)

    def _run(self, name: str, *args: str) -> None:
        """``pg_autoctl`` ``args``, running in the background (its own process group)."""
        with (self.root / f"{name}.log").open("ab") as log:
            self.running[name] = subprocess.Popen(
                ["pg_autoctl", *args], stdout=log, stderr=subprocess.STDOUT, env=self._env(),
                cwd=self.root, start_new_session=True, **self._as_server_user())

    def pgdata(self, name: str) -> str:
        return str(self.root / name)

    def url(self, name: str, dbname: str = DBNAME) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[name]}/{dbname}"

    @property
    def monitor_url(self) -> str:
        """The URL nodes and listeners use (pg_auto_failover's own role)."""
        return (f"postgresql://autoctl_node@127.0.0.1:{self.ports['monitor']}/"
                "pg_auto_failover?sslmode=disable")

    def start_monitor(self) -> None:
        self.ports["monitor"] = _free_port()
        self.autoctl("create", "monitor", "--pgdata", self.pgdata("monitor"), "--pgport",
                     str(self.ports["monitor"]), "--hostname", "127.0.0.1", "--auth", "trust",
                     "--no-ssl")
        self.autoctl("config", "set", "--pgdata", self.pgdata("monitor"),
                     "postgresql.listen_addresses", "127.0.0.1")
        self._run("monitor", "run", "--pgdata", self.pgdata("monitor"))
        with self._connected(self.url("monitor", "pg_auto_failover")) as conn:
            for name, value in MONITOR_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET pgautofailover.{name} = {value}")
            conn.execute("SELECT pg_reload_conf()")

    def start_node(self, name: str) -> None:
        """Create node ``name`` and run it: the first is the primary, the next its standby."""
        self.ports[name] = _free_port()
        self._run(name, "create", "postgres", "--pgdata", self.pgdata(name), "--pgport",
                  str(self.ports[name]), "--hostname", "127.0.0.1", "--listen", "127.0.0.1",
                  "--name", name, "--dbname", DBNAME, "--monitor", self.monitor_url,
                  "--auth", "trust", "--no-ssl", "--run")

    def settle(self, name: str) -> None:
        """Small settings for node ``name`` (reloaded, no restart)."""
        with self._connected(self.url(name, "postgres")) as conn:
            for setting, value in NODE_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {setting} = {value}")
            conn.execute("SELECT pg_reload_conf()")

    def state(self, name: str) -> str | None:
        """The state node ``name`` last reported to the monitor."""
        with psycopg.connect(self.url("monitor", "pg_auto_failover"), autocommit=True,
                             connect_timeout=5) as conn:
            row = conn.execute("SELECT reportedstate::text FROM pgautofailover.node "
                               "WHERE nodename = %s", (name,)).fetchone()
        return None if row is None else str(row[0])

    def wait_for(self, done: Callable[[], bool], what: str, timeout: float = 120,
                 poke: Callable[[], object] | None = None) -> None:
        """Until ``done()``; ``poke()`` between tries."""
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(psycopg.OperationalError):
                if done():
                    return
            if time.monotonic() > deadline:
                shown = self.autoctl("show", "state", "--pgdata", self.pgdata("monitor"))
                raise RuntimeError(f"{what}: not after {timeout} s; monitor says:\n{shown}")
            if poke is not None:
                with contextlib.suppress(psycopg.OperationalError):
                    poke()
            time.sleep(0.5)

    def wait_state(self, name: str, *states: str, timeout: float = 120,
                   poke: Callable[[], object] | None = None) -> None:
        self.wait_for(lambda: self.state(name) in states, f"node {name} in {states}", timeout,
                      poke)

    def checkpoint(self, name: str) -> None:
        """A checkpoint now: pg_basebackup of a new standby waits for one, spread over minutes
        otherwise (pg_autoctl asks for no fast one)."""
        with psycopg.connect(self.url(name, "postgres"), autocommit=True,
                             connect_timeout=5) as conn:
            conn.execute("CHECKPOINT")

    def asynchronous(self, standby: str, primary: str) -> None:
        """The standby out of the write quorum (pg_autoctl set node replication-quorum false,
        number-sync-standbys 0 being the default): the primary commits without waiting."""
        with psycopg.connect(self.url("monitor", "pg_auto_failover"), autocommit=True) as conn:
            assert conn.execute("SELECT number_sync_standbys FROM pgautofailover.formation "
                                "WHERE formationid = 'default'").fetchone() == (0,)
        self.autoctl("set", "node", "replication-quorum", "false", "--pgdata",
                     self.pgdata(standby))
        self.wait_for(lambda: self.setting(primary, "synchronous_standby_names") == "",
                      "the primary without synchronous standbys")

    def setting(self, name: str, setting: str) -> str:
        with psycopg.connect(self.url(name, "postgres"), autocommit=True,
                             connect_timeout=5) as conn:
            row = conn.execute("SELECT current_setting(%s)", (setting,)).fetchone()
        assert row is not None
        return str(row[0])

    def pause_replication(self, name: str) -> list[int]:
        """SIGSTOP the walsenders of node ``name``: from now on its WAL reaches no standby
        (its standbys still see a connection, and pg_stat_replication a sender)."""
        with psycopg.connect(self.url(name, "postgres"), autocommit=True) as conn:
            pids = [int(r[0]) for r in conn.execute("SELECT pid FROM pg_stat_replication")]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        return pids

    def kill(self, name: str) -> None:
        """Node ``name`` dies at once: its pg_autoctl (which would start PostgreSQL again)
        and its PostgreSQL, every process of it, with SIGKILL."""
        group = self.running[name].pid
        postmaster = int((Path(self.pgdata(name)) / "postmaster.pid").read_text().split()[0])
        os.killpg(group, signal.SIGSTOP)  # pg_autoctl and the postmaster: nothing starts anew
        deadline = time.monotonic() + 5
        while stat(postmaster)[:1] not in (["T"], []) and time.monotonic() < deadline:
            time.sleep(0.01)
        backends = [int(p.name) for p in Path("/proc").iterdir()
                    if p.name.isdigit() and stat(p.name)[1:2] == [str(postmaster)]]
        os.killpg(group, signal.SIGKILL)
        for pid in backends:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.running[name].wait(timeout=30)

    def stop(self) -> None:
        for name in reversed(list(self.running)):
            process = self.running[name]
            if process.poll() is None:
                with contextlib.suppress(RuntimeError):
                    self.autoctl("stop", "--pgdata", self.pgdata(name), "--immediate")
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)

    @contextlib.contextmanager
    def _connected(self, url: str, timeout: float = 60) -> Iterator[psycopg.Connection]:
        """A connection to ``url`` once the server there accepts one."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = psycopg.connect(url, autocommit=True, connect_timeout=5)
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        with conn:
            yield conn


@contextlib.contextmanager
def formation(prepare: Callable[[str], None]) -> Iterator[Formation]:
    """A monitor, primary ``node1`` and standby ``node2`` streaming from it synchronously
    (pg_auto_failover's default), ``prepare(url)`` run on the primary's database before the
    standby copies it."""
    root = Path(tempfile.mkdtemp(prefix="hivenet-ha-"))
    os.chmod(root, 0o755)
    made = Formation(root)
    if made._account is not None:
        os.chown(root, made._account.pw_uid, made._account.pw_gid)
    try:
        made.start_monitor()
        made.start_node("node1")
        made.wait_state("node1", "single")
        made.settle("node1")
        prepare(made.url("node1"))
        made.start_node("node2")
        made.wait_state("node2", "secondary", poke=lambda: made.checkpoint("node1"))
        made.wait_state("node1", "primary")
        made.settle("node2")
        yield made
    finally:
        made.stop()
        shutil.rmtree(root, ignore_errors=True)
