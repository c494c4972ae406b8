"""A primary with a streaming standby (pg_basebackup), on loopback ports of their own.

For the failover tests: the primary runs with fsync on; the standby is a physical copy that
streams WAL from it, synchronously (listed in ``synchronous_standby_names``) or not, and can
be cut off (stopped, as a network partition would), started again and promoted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg

from hivenet_db.tools import migrate
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres, _free_port
from tests.helpers import eventually

STANDBY_NAME = "standby1"


@dataclass
class Pair:
    primary: EmbeddedPostgres
    standby: EmbeddedPostgres
    dbname: str

    @property
    def primary_url(self) -> str:
        return self.primary.url(self.dbname)

    @property
    def standby_url(self) -> str:
        return self.standby.url(self.dbname)

    def wait_streaming(self, timeout: float = 60) -> None:
        """Until the primary sees the standby streaming (and, when synchronous, as sync)."""
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT state, sync_state FROM pg_stat_replication "
                    "WHERE application_name = %s", (STANDBY_NAME,)).fetchone()
                sync = conn.execute("SHOW synchronous_standby_names").fetchone()
                want = "sync" if sync and sync[0] else "async"
                if row is not None and row[0] == "streaming" and row[1] == want:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"standby not streaming ({row}):\n"
                                       f"{self.standby.log_tail(20)}")
                time.sleep(0.1)

    def wait_caught_up(self, timeout: float = 60) -> None:
        """Until the standby has replayed everything the primary has written so far."""
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            target = conn.execute("SELECT pg_current_wal_lsn()").fetchone()
        assert target is not None
        with psycopg.connect(self.standby.url(), autocommit=True) as conn:
            if not eventually(lambda: conn.execute("SELECT pg_last_wal_replay_lsn() >= %s",
                                                   (target[0],)).fetchone() == (True,), timeout):
                raise RuntimeError("standby did not catch up")

    def promote(self) -> None:
        """Promote the standby (pg_ctl promote waits until it accepts writes)."""
        self.standby._run("pg_ctl", "promote", "-w", "-t", "120", "-D", self.standby.data_dir)
        with psycopg.connect(self.standby.url(), autocommit=True) as conn:
            if not eventually(lambda: conn.execute("SELECT pg_is_in_recovery()").fetchone()
                              == (False,), 60):
                raise RuntimeError("standby still in recovery after promote")


def _set(server: EmbeddedPostgres, settings: dict[str, str]) -> None:
    """Rewrite postgresql.auto.conf with ``settings`` replacing lines of the same names."""
    conf = server.data_dir / "postgresql.auto.conf"
    kept = [line for line in conf.read_text().splitlines()
            if line.split("=", 1)[0].strip() not in settings]
    conf.write_text("\n".join([*kept, *(f"{k} = {v}" for k, v in settings.items())]) + "\n")


@contextlib.contextmanager
def primary_and_standby(*, synchronous: bool, dbname: str = "failover") -> Iterator[Pair]:
    """A migrated database ``dbname`` on a primary, and a standby streaming from it."""
    root = Path(tempfile.mkdtemp(prefix="hivenet-failover-"))
    os.chmod(root, 0o755)
    primary = EmbeddedPostgres(root=root / "primary", fsync=True)
    standby = EmbeddedPostgres(root=root / "standby", fsync=True)
    try:
        primary.init()
        _set(primary, {
            "wal_level": "replica", "max_wal_senders": "10",
            "synchronous_commit": "on",
        })
        primary.start()
        with psycopg.connect(primary.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {dbname}")
        migrate.upgrade(primary.url(dbname))
        standby._prepare_root()
        standby._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port),
                     "-U", "postgres", "-D", standby.data_dir, "-X", "stream", "--no-sync",
                     "-c", "fast")
        _set(standby, {
            "port": str(_free_port()),
            "unix_socket_directories": f"'{standby.data_dir}'",
            "primary_conninfo": f"'host=127.0.0.1 port={primary.port} user=postgres "
                                f"application_name={STANDBY_NAME}'",
            "synchronous_standby_names": "''",
        })
        (standby.data_dir / "standby.signal").touch()
        if standby.os_user:
            account = standby._os_account()
            for path in (standby.data_dir / "standby.signal",
                         standby.data_dir / "postgresql.auto.conf"):
                os.chown(path, account.pw_uid, account.pw_gid)
        standby.start()
        pair = Pair(primary, standby, dbname)
        if synchronous:  # only now: until the standby streams, every commit would wait
            with psycopg.connect(primary.url(), autocommit=True) as conn:
                conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
                conn.execute("SELECT pg_reload_conf()")
        pair.wait_streaming()
        yield pair
    finally:
        for server in (standby, primary):
            with contextlib.suppress(Exception):
                server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def exposed(url: str, serials: set[str], prepared: tuple[str, ...]) -> int:
    """How many of the committed unified and interface ``serials`` (system C0001, module A01;
    instances in ``prepared`` on scopes of their own, every serial of one the standby has no
    counter of; the others on the shared fallback counters) stand above where the counters
    of the promoted standby at ``url`` are: an unfenced standby would issue each of them
    again. Read, not drawn: a draw would fence them."""
    with psycopg.connect(url, autocommit=True) as conn:
        stride: dict[str, int] = dict(
            conn.execute("SELECT name, stride FROM hivenet.format").fetchall())
        value: dict[str, int] = dict(conn.execute(
            "SELECT sequencename, coalesce(last_value, 0) FROM pg_sequences "
            "WHERE schemaname = 'hivenet'").fetchall())
    count = 0
    for serial in serials:
        kind = "unified" if len(serial) == 28 else "interface"
        instance = serial[8:10]
        counter = f"seq_{kind}_C0001A01{instance}" if instance in prepared else f"cold_{kind}"
        count += int(serial[-10:]) > value.get(counter, 0) % stride[kind]  # none: lost
    return count
