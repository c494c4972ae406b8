"""Extra servers some tests start: PgBouncer in front of the suite's PostgreSQL, and what a
pooled server session holds.

Started as an unprivileged user when we are root (PgBouncer refuses root, like PostgreSQL),
waited for until it accepts, and always stopped by its pid.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

PGBOUNCER_MISSING = (
    "pgbouncer is not installed (looked on PATH and in /usr/sbin): install it with "
    "`apt-get install pgbouncer` (.ci/run does); these tests prove hivenet-db works behind it"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pgbouncer_binary() -> str | None:
    # Debian puts it in /usr/sbin, which a non-root PATH often lacks.
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")


def _run_as() -> pwd.struct_passwd | None:
    """The account PgBouncer runs as: ours, or the embedded server's user when we are root."""
    if os.geteuid() != 0:
        return None
    return pwd.getpwnam(os.environ.get("HIVENET_EMBEDDED_USER", "postgres"))


def _config(directory: Path, listen_port: int, server_port: int, pool_size: int,
            max_clients: int, databases: Mapping[str, str], settings: Mapping[str, str]) -> str:
    entries = {**databases,
               # any other database name the client asks for, on the suite's server
               "*": f"host=127.0.0.1 port={server_port}"}
    values = {
        "listen_addr": "127.0.0.1",
        "listen_port": str(listen_port),
        "unix_socket_dir": str(directory),
        "auth_type": "trust",
        "auth_file": str(directory / "userlist.txt"),
        "pool_mode": "transaction",
        "default_pool_size": str(pool_size),
        "min_pool_size": "0",
        "reserve_pool_size": "0",
        "max_client_conn": str(max_clients),
        # a client waiting longer than this for a server connection gets an error, not a hang
        "query_wait_timeout": "30",
        "ignore_startup_parameters": "extra_float_digits",
        "pidfile": str(directory / "pgbouncer.pid"),
        "logfile": str(directory / "pgbouncer.log"),
        **settings,
    }
    return "\n".join(["[databases]", *(f"{k} = {v}" for k, v in entries.items()),
                      "", "[pgbouncer]", *(f"{k} = {v}" for k, v in values.items()), ""])


@dataclass(frozen=True)
class Bouncer:
    port: int  # on 127.0.0.1
    socket_dir: Path  # where its Unix socket is (libpq's host for it)


@contextlib.contextmanager
def pgbouncer(server_port: int, *, pool_size: int = 4, max_clients: int = 100,
              user: str = "postgres") -> Iterator[int]:
    """PgBouncer in transaction pooling in front of 127.0.0.1:``server_port``, trusting
    ``user``; yields its port. Raises FileNotFoundError(PGBOUNCER_MISSING) without it."""
    with started_pgbouncer(server_port, pool_size=pool_size, max_clients=max_clients,
                           users=(user,)) as bouncer:
        yield bouncer.port


@contextlib.contextmanager
def started_pgbouncer(server_port: int, *, pool_size: int = 4, max_clients: int = 100,
                      users: Sequence[str] = ("postgres",),
                      databases: Mapping[str, str] | None = None,
                      settings: Mapping[str, str] | None = None) -> Iterator[Bouncer]:
    """``pgbouncer``, trusting each of ``users`` (client logins: the server's own, or any
    name for an entry of ``databases`` that connects as a user of its own), with more
    entries in ``[databases]`` (name → connection string) and ``settings`` of section
    ``[pgbouncer]`` (over the defaults above)."""
    binary = pgbouncer_binary()
    if binary is None:
        raise FileNotFoundError(PGBOUNCER_MISSING)
    account = _run_as()
    directory = Path(tempfile.mkdtemp(prefix="hivenet-pgbouncer-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        port = free_port()
        (directory / "pgbouncer.ini").write_text(
            _config(directory, port, server_port, pool_size, max_clients, databases or {},
                    settings or {}))
        # trust: names only
        (directory / "userlist.txt").write_text("".join(f'"{user}" ""\n' for user in users))
        kwargs: dict[str, object] = {}
        if account is not None:
            for path in (directory, *directory.iterdir()):
                os.chown(path, account.pw_uid, account.pw_gid)
            kwargs = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        os.chmod(directory, 0o700)
        with (directory / "stderr.log").open("wb") as stderr:
            proc = subprocess.Popen(  # type: ignore[call-overload]
                [binary, str(directory / "pgbouncer.ini")], stdin=subprocess.DEVNULL,
                stdout=stderr, stderr=stderr, cwd="/", **kwargs)
        _wait_until_it_accepts(proc, port, users[0], directory)
        yield Bouncer(port, directory)
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(directory, ignore_errors=True)


def _log(directory: Path) -> str:
    text = ""
    for name in ("stderr.log", "pgbouncer.log"):
        with contextlib.suppress(OSError):
            text += (directory / name).read_text(errors="replace")
    return "\n".join(text.splitlines()[-20:])


def _wait_until_it_accepts(proc: subprocess.Popen[bytes], port: int, user: str,
                           directory: Path) -> None:
    url = f"postgresql://{user}@127.0.0.1:{port}/postgres"
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited ({proc.returncode}):\n{_log(directory)}")
        try:
            with psycopg.connect(url, connect_timeout=2, prepare_threshold=None) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not accept on {port}:\n{_log(directory)}"
                                   ) from None
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (immediate shutdown) to its pid, SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def left_on_the_session(url: str) -> dict[str, Any]:
    """What the pooled server session of ``url`` holds besides a fresh session's: its
    process (the same one every run used, with one server session per database), prepared
    statements, LISTEN channels, temporary objects, settings a client SET for the session
    (beyond those PgBouncer sets itself for each client)."""
    with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
        row = conn.execute("""
            SELECT pg_backend_pid(),
                   (SELECT array_agg(name ORDER BY name) FROM pg_prepared_statements),
                   (SELECT array_agg(c ORDER BY c) FROM pg_listening_channels() c),
                   (SELECT array_agg(c.relname ORDER BY c.relname) FROM pg_class c
                    WHERE c.relnamespace = pg_my_temp_schema()),
                   (SELECT array_agg(p.proname ORDER BY p.proname) FROM pg_proc p
                    WHERE p.pronamespace = pg_my_temp_schema()),
                   (SELECT array_agg(name ORDER BY name) FROM pg_settings
                    WHERE source = 'session' AND name NOT IN (
                        'application_name', 'client_encoding', 'DateStyle', 'TimeZone',
                        'standard_conforming_strings'))""").fetchone()
    assert row is not None
    pid, *state = row
    return {"pid": pid, **dict(zip(("prepared", "listening", "temporary relations",
                                    "temporary functions", "session settings"), state,
                                   strict=True))}


NOTHING_LEFT = {"prepared": None, "listening": None, "temporary relations": None,
                "temporary functions": None, "session settings": None}
