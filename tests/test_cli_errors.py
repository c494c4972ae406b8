"""Operator errors of the ``hivenet-db`` command, and ``migrate --check``: the command (in the
test's process, ``tests/command.py``) against the real test server. A failure is one line on
stderr naming the problem and what to do, exit status 2 (1 only for hivenet's HN errors),
never a password."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hivenet_db.tools import migrate
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres
from tests.command import in_process
from tests.helpers import eventually
from tests.test_cli import SCOPE

SERIAL = "C0001A0101201507100123456789"
URL_FORM = "postgresql://USER:PASSWORD@HOST:PORT/DATABASE"
NEWER = "database {db} is at revision 9999, which hivenet-db {version} does not know (its " \
        "head is {head}): the schema is newer than the package; upgrade the package (pip " \
        "install -U hivenet-db)"


def failure(result: subprocess.CompletedProcess[str], rc: int = 2) -> str:
    """The one line a failed command printed (without the ``hivenet-db:`` prefix)."""
    assert result.returncode == rc, (result.returncode, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("hivenet-db"), lines[0]
    return lines[0].split(": ", 1)[1]


def _dbname(url: str) -> str:
    return url.rsplit("/", 1)[1]


def _url(server: EmbeddedPostgres, dbname: str, user: str, password: str | None = None) -> str:
    secret = f":{password}" if password else ""
    return f"postgresql://{user}{secret}@127.0.0.1:{server.port}/{dbname}"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _version() -> str:
    from importlib.metadata import version

    return version("hivenet-db")


@pytest.fixture
def superuser(hivenet_server: EmbeddedPostgres) -> Iterator[psycopg.Connection]:
    with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
        yield conn


@pytest.fixture
def empty_url(hivenet_server: EmbeddedPostgres) -> Iterator[str]:
    """A database without schema hivenet."""
    name = "hivenet_cli_empty"
    hivenet_server.drop_database(name)
    yield hivenet_server.ensure_database(name)
    hivenet_server.drop_database(name)


@pytest.fixture
def weak(superuser: psycopg.Connection) -> Iterator[str]:
    """A role that may log in and do nothing else."""
    name = "hivenet_cli_weak"
    superuser.execute(f"DROP ROLE IF EXISTS {name}")
    superuser.execute(f"CREATE ROLE {name} LOGIN")
    yield name
    superuser.execute(f"DROP ROLE {name}")


# ---------------------------------------------------------------- URL and connection


@pytest.mark.parametrize("url", ["nonsense://x", "postgresql://[bad",
                                 "postgresql://u@127.0.0.1:notaport/db", "host=x dbname=y"])
def test_malformed_url(url: str) -> None:
    line = failure(in_process("report", "--url", url))
    assert "URL" in line and line.endswith(f"expected {URL_FORM}")


def test_unreachable_server() -> None:
    port = _closed_port()
    line = failure(in_process("next", "unified", *SCOPE, "--url", f"postgresql://u@127.0.0.1:{port}/x"))
    assert line == f"cannot reach PostgreSQL at 127.0.0.1:{port} (Connection refused): check " \
                   "the host and port in the URL and that the server is running"


def test_nonexistent_database(hivenet_server: EmbeddedPostgres) -> None:
    line = failure(in_process("report", "--url", hivenet_server.url("hivenet_no_such_db")))
    assert line == f"database hivenet_no_such_db does not exist at 127.0.0.1:" \
                   f"{hivenet_server.port}: create it (createdb hivenet_no_such_db) or correct " \
                   "the database name in the URL"


def test_unknown_role_is_an_authentication_failure(hivenet_url: str,
                                                   hivenet_server: EmbeddedPostgres) -> None:
    url = _url(hivenet_server, _dbname(hivenet_url), "nobody")
    line = failure(in_process("maintain", "--url", url))
    assert line == f"authentication failed: role nobody does not exist at 127.0.0.1:" \
                   f"{hivenet_server.port}: correct the user in the URL, or create the role"


@pytest.fixture
def password_role(superuser: psycopg.Connection) -> Iterator[str]:
    """A role whose password the server checks (scram), although the test server trusts
    every other role: a line of its own at the top of pg_hba.conf, removed afterwards."""
    name = "hivenet_cli_pw"
    superuser.execute(f"DROP ROLE IF EXISTS {name}")
    superuser.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'right-pw'")
    hba = Path(superuser.execute("SHOW hba_file").fetchone()[0])
    rules = hba.read_text()
    hba.write_text(f"host all {name} 127.0.0.1/32 scram-sha-256\n{rules}")
    superuser.execute("SELECT pg_reload_conf()")
    try:
        yield name
    finally:
        hba.write_text(rules)
        superuser.execute("SELECT pg_reload_conf()")
        superuser.execute(f"DROP ROLE {name}")


def _password_checked(url: str) -> bool:
    """Whether the server has reloaded pg_hba.conf (pg_reload_conf only sends a signal)."""
    try:
        psycopg.connect(url).close()
    except psycopg.OperationalError:
        return True
    return False


def test_wrong_password_is_an_authentication_failure(
        password_role: str, empty_url: str, hivenet_server: EmbeddedPostgres) -> None:
    wrong = _url(hivenet_server, _dbname(empty_url), password_role, "wrong-pw")
    assert eventually(lambda: _password_checked(wrong), 10), "pg_hba.conf was not reloaded"
    result = in_process("migrate", "--check", "--url", wrong)
    line = failure(result)
    assert line == f"authentication failed for role {password_role} at 127.0.0.1:" \
                   f"{hivenet_server.port}: correct the password in the URL (or PGPASSWORD, " \
                   "~/.pgpass)"
    assert "wrong-pw" not in result.stderr
    # The right password gets in: the refusal above was the password's.
    right = in_process("migrate", "--check", "--url",
                 _url(hivenet_server, _dbname(empty_url), password_role, "right-pw"))
    assert right.returncode == 5 and "not installed" in right.stdout


# ---------------------------------------------------------------- privileges


@pytest.mark.parametrize("command", [["maintain"], ["next", "unified", *SCOPE]])
def test_permission_denied(command: list[str], weak: str, hivenet_url: str,
                           hivenet_server: EmbeddedPostgres) -> None:
    dbname = _dbname(hivenet_url)
    line = failure(in_process(*command, "--url", _url(hivenet_server, dbname, weak)))
    assert line == f"permission denied for schema hivenet: role {weak} lacks a privilege that " \
                   f"`hivenet-db {command[0]}` needs in {dbname}: connect as the schema's " \
                   "owner or a role granted it (docs/operations.md, Privileges)"


def test_migrate_without_rights_asks_for_bootstrap(weak: str, empty_url: str,
                                                   hivenet_server: EmbeddedPostgres) -> None:
    dbname = _dbname(empty_url)
    line = failure(in_process("migrate", "--url", _url(hivenet_server, dbname, weak)))
    # CREATE SCHEMA needs the CREATE right on the database, which bootstrap grants.
    assert line == f"permission denied for database {dbname}: role {weak} may not create or " \
                   f"change schema hivenet in {dbname}; a superuser must run `hivenet-db " \
                   f"bootstrap --owner {weak}` once for this database, then run `hivenet-db " \
                   f"migrate` as {weak}"


def test_the_owner_of_the_database_installs_without_superuser(
        weak: str, superuser: psycopg.Connection, hivenet_server: EmbeddedPostgres) -> None:
    """A fresh install needs no extension and no superuser: the database's owner (who may
    create schemas in it) installs schema hivenet."""
    dbname = "hivenet_cli_owned"
    superuser.execute(f"CREATE DATABASE {dbname} OWNER {weak}")
    try:
        result = in_process("migrate", "--url", _url(hivenet_server, dbname, weak))
        assert result.returncode == 0, result.stderr
        check = in_process("migrate", "--check", "--url", hivenet_server.url(dbname))
        assert check.returncode == 0, check.stdout
    finally:
        hivenet_server.drop_database(dbname)


# ---------------------------------------------------------------- schema state


@pytest.mark.parametrize("command", [["report"], ["next", "unified", *SCOPE], ["maintain"],
                                     ["parse", SERIAL], ["demo"]])
def test_schema_not_installed(command: list[str], empty_url: str) -> None:
    line = failure(in_process(*command, "--url", empty_url))
    assert line == f"schema hivenet is not installed in {_dbname(empty_url)}: run " \
                   "`hivenet-db migrate`"


@pytest.fixture
def newer_url(hivenet_url: str, db: psycopg.Connection) -> str:
    """A database stamped by a hivenet-db newer than this one."""
    db.execute("UPDATE hivenet_alembic_version SET version_num = '9999'")
    return hivenet_url


@pytest.mark.parametrize("command", [["report"], ["next", "unified", *SCOPE], ["maintain"],
                                     ["parse", SERIAL], ["demo"], ["migrate"],
                                     ["downgrade", "-1"]])
def test_schema_newer_than_the_package(command: list[str], newer_url: str,
                                       db: psycopg.Connection) -> None:
    line = failure(in_process(*command, "--url", newer_url))
    assert line == NEWER.format(db=_dbname(newer_url), version=_version(), head=migrate.head())
    assert db.execute("SELECT version_num FROM hivenet_alembic_version").fetchall() == \
        [("9999",)]


@pytest.mark.parametrize("command", [["report"], ["migrate"], ["migrate", "--check"]])
def test_version_table_with_two_revisions(command: list[str], hivenet_url: str,
                                          db: psycopg.Connection) -> None:
    older = "0000"  # a row left behind: its revision need not exist
    db.execute("INSERT INTO hivenet_alembic_version VALUES (%s)", (older,))
    line = failure(in_process(*command, "--url", hivenet_url))
    assert line == f"hivenet_alembic_version in database {_dbname(hivenet_url)} holds 2 " \
                   f"revisions ({older}, {migrate.head()}) instead of one: delete the rows of " \
                   "the revisions the schema is not at, then run `hivenet-db migrate --check`"


@pytest.mark.parametrize("command", ["migrate --revision", "downgrade"])
def test_revision_that_does_not_exist(command: str, hivenet_url: str) -> None:
    line = failure(in_process(*command.split(), "7777", "--url", hivenet_url))
    revisions = ", ".join(migrate.revisions())
    assert line == f"{command.split()[0]} to '7777': Can't locate revision identified by " \
                   f"'7777'; this package's revisions are {revisions} (head {migrate.head()})"


# ---------------------------------------------------------------- passwords, --debug, usage


@pytest.mark.parametrize("debug", [[], ["--debug"]])
def test_password_is_never_printed(debug: list[str]) -> None:
    port = _closed_port()
    urls = [f"postgresql://u:s3cret@127.0.0.1:{port}/db",
            "postgresql://u:s3cret@[bad/db",  # libpq quotes this one back
            f"postgresql://u@127.0.0.1:{port}/db?password=s3cret"]
    for url in urls:
        for command in (["report"], ["migrate"], ["migrate", "--check"], ["demo"]):
            result = in_process(*command, *debug, "--url", url)
            assert result.returncode == 2, result.stderr
            assert "s3cret" not in result.stdout + result.stderr, (url, command)
    # Also from the environment, where a deployment keeps it.
    result = in_process("report", *debug, env={"HIVENET_DATABASE_URL": urls[1]})
    assert result.returncode == 2 and "s3cret" not in result.stderr
    assert "u:***@[bad" in result.stderr  # the URL is shown, its password is not


def test_traceback_only_with_debug() -> None:
    url = f"postgresql://u@127.0.0.1:{_closed_port()}/db"
    plain = failure(in_process("maintain", "--url", url))
    debug = in_process("maintain", "--debug", "--url", url)
    assert debug.returncode == 2
    assert debug.stderr.startswith("Traceback") and "psycopg.OperationalError" in debug.stderr
    assert debug.stderr.splitlines()[-1] == f"hivenet-db: {plain}"


def test_usage_mistake_is_one_line() -> None:
    line = failure(in_process("next", "unified", "--count", "x"))
    assert line == "argument --count/-n: 'x': expected a whole number, at least 1 (see " \
                   "`hivenet-db next --help`)"
    # A combination argparse cannot check points to the command's help too.
    line = failure(in_process("migrate", "--check", "--time-zone", "UTC"))
    assert line == "--check changes nothing: drop --time-zone (see `hivenet-db migrate --help`)"


def test_hivenet_error_keeps_exit_status_1(hivenet_url: str) -> None:
    line = failure(in_process("parse", "C0001", "--url", hivenet_url), rc=1)
    assert line.startswith("HN001 InvalidInput: ")


# ---------------------------------------------------------------- migrate --check


def _check(url: str) -> tuple[int, dict[str, Any], str]:
    as_json = in_process("migrate", "--check", "--json", "--url", url)
    text = in_process("migrate", "--check", "--url", url)
    assert as_json.stderr == text.stderr == "" and as_json.returncode == text.returncode
    return text.returncode, json.loads(as_json.stdout), text.stdout.strip()


def test_check_at_head(hivenet_url: str) -> None:
    db, head = _dbname(hivenet_url), migrate.head()
    assert _check(hivenet_url) == (0, {"database": db, "current": head, "head": head,
                                       "state": "head"}, f"database {db} is at head {head}")


@pytest.mark.skipif(len(migrate.revisions()) < 2, reason="one revision: none is behind head")
def test_check_behind_then_migrate(hivenet_url: str) -> None:
    db, head, oldest = _dbname(hivenet_url), migrate.head(), migrate.revisions()[0]
    migrate.downgrade(hivenet_url, oldest)
    assert _check(hivenet_url) == (
        3, {"database": db, "current": oldest, "head": head, "state": "behind"},
        f"database {db} is at revision {oldest}, behind head {head}: run `hivenet-db migrate`")
    assert in_process("migrate", "--url", hivenet_url).returncode == 0
    assert _check(hivenet_url)[0] == 0


def test_check_ahead(newer_url: str) -> None:
    db = _dbname(newer_url)
    assert _check(newer_url) == (
        4, {"database": db, "current": "9999", "head": migrate.head(), "state": "ahead"},
        NEWER.format(db=db, version=_version(), head=migrate.head()))


def test_check_not_installed(empty_url: str) -> None:
    db = _dbname(empty_url)
    assert _check(empty_url) == (
        5, {"database": db, "current": None, "head": migrate.head(), "state": "not_installed"},
        f"schema hivenet is not installed in {db}: run `hivenet-db migrate`")


def test_check_untracked(hivenet_url: str, db: psycopg.Connection) -> None:
    """Schema hivenet installed without this version table (`hivenet-db sql`, or the
    application's own alembic tree): neither at head nor to be installed again."""
    db.execute("DROP TABLE hivenet_alembic_version")
    code, status, text = _check(hivenet_url)
    assert (code, status["state"], status["current"]) == (6, "untracked", None)
    assert "records no revision" in text
    line = failure(in_process("migrate", "--url", hivenet_url))
    assert line == text  # migrate refuses to install it a second time
    assert in_process("next", "unified", *SCOPE, "--url", hivenet_url).returncode == 0


def test_check_rejects_revision(hivenet_url: str) -> None:
    line = failure(in_process("migrate", "--check", "--revision", "0001", "--url", hivenet_url))
    assert "--check compares the database with the package's head" in line
