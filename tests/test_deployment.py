"""Install and run as on a managed server (SPEC §6): every connection needs a password, a
superuser runs `hivenet-db bootstrap` once, a plain owner role migrates, and login roles do
their work with no superuser and no secret stored in the database."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, create_engine, text

from hivenet_db import SerialRepository
from hivenet_db.testing import scratch_dir
from hivenet_db.tools.embedded_postgres import SUPERUSER, EmbeddedPostgres, find_bin_dir
from hivenet_db.urls import sqlalchemy_url

COMMAND = Path(sys.executable).with_name("hivenet-db")
DATABASE = "hivenet_deploy"
OWNER, APP, OPS = "hivenet_owner", "app_login", "ops_login"
# A managed server's administrator: no superuser, but CREATEROLE and CREATEDB.
CLOUD_ADMIN, CLOUD_OWNER, CLOUD_DATABASE = "cloud_admin", "cloud_owner", "hivenet_cloud"
BOOTSTRAP_STATEMENTS = [
    "CREATE ROLE hivenet_app NOLOGIN",
    "CREATE ROLE hivenet_reporting NOLOGIN",
    "CREATE ROLE hivenet_admin NOLOGIN",
    f"GRANT CREATE ON DATABASE {DATABASE} TO {OWNER}",
    f"GRANT CREATE ON SCHEMA public TO {OWNER}",
    f"GRANT hivenet_app TO {OWNER} WITH ADMIN OPTION",
    f"GRANT hivenet_reporting TO {OWNER} WITH ADMIN OPTION",
    f"GRANT hivenet_admin TO {OWNER} WITH ADMIN OPTION",
]


@dataclass
class Cluster:
    server: EmbeddedPostgres
    passwords: dict[str, str]  # role -> its plaintext password, superuser included

    def url(self, role: str, dbname: str = DATABASE) -> str:
        return (f"postgresql://{role}:{self.passwords[role]}@127.0.0.1:{self.server.port}/"
                f"{dbname}")


#: The channels the tests allocate for, prepared by `migrate --prepare` as at a deployment.
SCOPES = Path(__file__).resolve().parent / "deployment_scopes.txt"


def _hivenet_db(*args: str) -> subprocess.CompletedProcess[str]:
    # No libpq variable of ours may supply a password: each comes from its URL only.
    env = {k: v for k, v in os.environ.items()
           if k != "HIVENET_DATABASE_URL" and not k.startswith("PG")}
    return subprocess.run([str(COMMAND), *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    """A server demanding scram-sha-256 on TCP and socket, database hivenet_deploy owned by
    the superuser, and three login roles with nothing but a password."""
    # Hex passwords: fine in URLs as they are, and distinctive to look for in a dump.
    passwords = {role: f"pw{secrets.token_hex(12)}"
                 for role in (SUPERUSER, OWNER, APP, OPS, CLOUD_ADMIN, CLOUD_OWNER)}
    root = Path(tempfile.mkdtemp(prefix="hivenet-deploy-", dir=scratch_dir()))
    os.chmod(root, 0o755)  # the server's user must reach its directory below
    server = EmbeddedPostgres(root=root / "pg", fsync=False, password=passwords[SUPERUSER])
    try:
        server.start()
        server.ensure_database(DATABASE)
        with psycopg.connect(server.url(DATABASE), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {OWNER} LOGIN PASSWORD '{passwords[OWNER]}' "
                         "NOSUPERUSER NOCREATEDB NOCREATEROLE")
            for role in (APP, OPS):
                conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{passwords[role]}'")
            conn.execute(f"CREATE ROLE {CLOUD_ADMIN} LOGIN PASSWORD '{passwords[CLOUD_ADMIN]}' "
                         "NOSUPERUSER CREATEDB CREATEROLE")
        yield Cluster(server, passwords)
    finally:
        server.remove()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> subprocess.CompletedProcess[str]:
    """The documented install: bootstrap by the superuser, migrate by the owner, login roles
    granted their group role by the owner. Returns the first bootstrap's output."""
    bootstrap = _hivenet_db("bootstrap", "--owner", OWNER, "--url", cluster.url(SUPERUSER))
    assert bootstrap.returncode == 0, bootstrap.stderr
    migrate = _hivenet_db("migrate", "--prepare", str(SCOPES), "--url", cluster.url(OWNER))
    assert migrate.returncode == 0, migrate.stderr
    assert cluster.passwords[OWNER] not in migrate.stdout + migrate.stderr
    with psycopg.connect(cluster.url(OWNER), autocommit=True) as conn:
        conn.execute(f"GRANT hivenet_app TO {APP}")
        conn.execute(f"GRANT hivenet_admin TO {OPS}")
    return bootstrap


@pytest.fixture
def app_engine(cluster: Cluster, installed: object) -> Iterator[Engine]:
    """SQLAlchemy engine of the application login role, password in its URL."""
    engine = create_engine(sqlalchemy_url(cluster.url(APP)))
    try:
        yield engine
    finally:
        engine.dispose()


def _scalar(conn: psycopg.Connection, sql: str, params: Any = None) -> Any:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


@pytest.mark.parametrize("host", ["tcp", "socket"])
def test_the_server_demands_a_password(cluster: Cluster, host: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    address = "127.0.0.1" if host == "tcp" else str(cluster.server.data_dir)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(host=address, port=cluster.server.port, user=SUPERUSER,
                        dbname=DATABASE, passfile=os.devnull, connect_timeout=10)
    with psycopg.connect(host=address, port=cluster.server.port, user=SUPERUSER,
                         dbname=DATABASE, password=cluster.passwords[SUPERUSER]) as conn:
        assert _scalar(conn, "SELECT current_user") == SUPERUSER


def test_migrate_without_bootstrap_says_which_command_creates_the_roles(
        cluster: Cluster) -> None:
    """Before bootstrap (no roles yet), an owner that may not create roles installs a working
    schema for itself, says in one line what creates the roles, and grants nothing to PUBLIC.
    Runs before `installed` (file order): the roles do not exist yet."""
    early = "hivenet_early"
    with psycopg.connect(cluster.server.url(DATABASE), autocommit=True) as conn:
        assert _scalar(conn, "SELECT count(*) FROM pg_roles WHERE rolname IN "
                             "('hivenet_app', 'hivenet_reporting', 'hivenet_admin')") == 0
        conn.execute(f"CREATE DATABASE {early} OWNER {OWNER}")
    try:
        migrate = _hivenet_db("migrate", "--prepare", str(SCOPES), "--url",
                              cluster.url(OWNER, early))
        assert migrate.returncode == 0, migrate.stderr
        notes = [line for line in migrate.stderr.splitlines() if "bootstrap" in line]
        assert notes == ["hivenet-db: role(s) hivenet_app, hivenet_reporting, hivenet_admin do "
                         "not exist, so only the schema's owner may use it: a superuser creates "
                         "them with `hivenet-db bootstrap --owner ROLE`"]
        with psycopg.connect(cluster.url(OWNER, early)) as conn:
            assert _scalar(conn, "SELECT hivenet.next_unified_serial('D0009', 'M01', '01')")
            assert _scalar(conn, """
                SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'hivenet'::regnamespace
                  AND has_function_privilege('public', p.oid, 'EXECUTE')""") == 0
            assert _scalar(conn, """
                SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'hivenet'::regnamespace
                  AND c.relacl::text ~ '[{,]='""") == 0  # an entry for PUBLIC
    finally:
        with psycopg.connect(cluster.server.url(DATABASE), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {early}")


def test_bootstrap_says_what_it_did_then_that_nothing_is_left(
        cluster: Cluster, installed: subprocess.CompletedProcess[str]) -> None:
    assert installed.stdout.splitlines() == [f"ran: {s}" for s in BOOTSTRAP_STATEMENTS]
    # Now that the schema is there, bootstrap also checks the schema's grants to the roles.
    statements = [*BOOTSTRAP_STATEMENTS, "SELECT hivenet._grant_roles()"]
    again = _hivenet_db("bootstrap", "--owner", OWNER, "--url", cluster.url(SUPERUSER))
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert lines[:-1] == [f"already done: {s}" for s in statements]
    assert lines[-1].startswith("nothing to do")
    as_json = _hivenet_db("bootstrap", "--owner", OWNER, "--json", "--url",
                          cluster.url(SUPERUSER))
    assert json.loads(as_json.stdout) == {
        "database": DATABASE, "owner": OWNER, "changed": False, "complete": True,
        "actions": [{"statement": s, "outcome": "already done"} for s in statements]}
    for result in (installed, again, as_json):
        assert cluster.passwords[SUPERUSER] not in result.stdout + result.stderr


def test_bootstrap_roles_cannot_log_in_and_the_owner_can_grant_them(
        cluster: Cluster, installed: object) -> None:
    with psycopg.connect(cluster.server.url(DATABASE)) as conn:
        rows = conn.execute("""
            SELECT r.rolname, r.rolcanlogin, m.admin_option
            FROM pg_roles r JOIN pg_auth_members m ON m.roleid = r.oid
            WHERE m.member = %s::regrole ORDER BY r.rolname""", (OWNER,)).fetchall()
        assert rows == [("hivenet_admin", False, True), ("hivenet_app", False, True),
                        ("hivenet_reporting", False, True)]
        # Granted by the owner itself, not by the superuser.
        grantors = conn.execute("""
            SELECT m.member::regrole::text, m.grantor::regrole::text FROM pg_auth_members m
            WHERE m.roleid IN ('hivenet_app'::regrole, 'hivenet_admin'::regrole)
              AND m.member IN (%s::regrole, %s::regrole) ORDER BY 1""", (APP, OPS)).fetchall()
        assert grantors == [(APP, OWNER), (OPS, OWNER)]


def test_bootstrap_needs_an_existing_owner(cluster: Cluster) -> None:
    result = _hivenet_db("bootstrap", "--owner", "nobody_here", "--url", cluster.url(SUPERUSER))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "CREATE ROLE nobody_here LOGIN PASSWORD" in result.stderr
    with psycopg.connect(cluster.server.url(DATABASE)) as conn:
        assert _scalar(conn, "SELECT count(*) FROM pg_roles WHERE rolname = 'nobody_here'") == 0


def test_bootstrap_by_a_role_without_the_rights_changes_nothing(cluster: Cluster) -> None:
    """PostgreSQL only warns when a GRANT grants nothing: bootstrap must not report it done."""
    result = _hivenet_db("bootstrap", "--owner", OPS, "--url", cluster.url(APP))
    assert result.returncode == 2, result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "run bootstrap as a superuser, or as an administrator with CREATEROLE" in \
        result.stderr
    assert cluster.passwords[APP] not in result.stderr
    with psycopg.connect(cluster.server.url(DATABASE)) as conn:
        assert not _scalar(conn, "SELECT has_database_privilege(%s, current_database(), "
                                 "'CREATE')", (OPS,))


def test_a_plain_owner_installs_the_schema(cluster: Cluster, installed: object) -> None:
    with psycopg.connect(cluster.server.url(DATABASE)) as conn:
        owner = conn.execute("""
            SELECT r.rolsuper, r.rolcreatedb, r.rolcreaterole, n.nspowner::regrole::text
            FROM pg_namespace n, pg_roles r
            WHERE n.nspname = 'hivenet' AND r.rolname = %s""", (OWNER,)).fetchone()
        assert owner == (False, False, False, OWNER)
        assert _scalar(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'dblink'") == 0
    again = _hivenet_db("migrate", "--url", cluster.url(OWNER))
    assert again.returncode == 0, again.stderr


FIELDS = {  # a scope of each format that no other test uses
    "unified": {"system": "D0001", "module": "U01", "instance": "01"},
    "system": {"system": "D0001", "module": "S01", "instance": "02"},
    "interface": {"system": "D0001", "module": "I01", "instance": "03", "target": "E0001"},
    "id_service": {"merchant": "123456789012", "shard": "07"},
    "merchant_trade": {"merchant": "210987654321"},
    "per_second": {},
}
LENGTHS = {"unified": 28, "system": 30, "interface": 39, "id_service": 28,
           "merchant_trade": 32, "per_second": 17}


def test_the_application_role_uses_the_api(app_engine: Engine) -> None:
    with app_engine.begin() as conn:
        assert not conn.execute(text(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user")).scalar()
        issued = {}
        for name, fields in FIELDS.items():
            serial = conn.execute(text("SELECT hivenet.next_serial(:f, CAST(:j AS jsonb))"),
                                  {"f": name, "j": json.dumps(fields)}).scalar()
            assert isinstance(serial, str) and len(serial) == LENGTHS[name], (name, serial)
            parsed = conn.execute(text("SELECT hivenet.parse_serial(:s, :f)"),
                                  {"s": serial, "f": name}).scalar()
            assert parsed["format"] == name, parsed
            assert {k: parsed[k] for k in fields} == fields
            issued[name] = serial
        conn.execute(text("SELECT hivenet.claim_interface_serial(:i, :u, :s)"),
                     {"i": issued["interface"], "u": issued["unified"], "s": issued["system"]})
        assert conn.execute(text("SELECT count(*) FROM hivenet.call_chain(:u)"),
                            {"u": issued["unified"]}).scalar() == 1

        step = conn.execute(text("SELECT hivenet.next_system_serial('D0001', 'S01', '04')")
                            ).scalar()
        started = conn.execute(text(
            "SELECT outcome, attempt FROM hivenet.begin_step(:s, CAST(:r AS jsonb))"),
            {"s": step, "r": '{"amount": 1}'}).one()
        assert started.outcome == "started"
        conn.execute(text("SELECT hivenet.finish_step(:s, :a, true, CAST(:r AS jsonb))"),
                     {"s": step, "a": started.attempt, "r": '{"ok": true}'})
        replayed = conn.execute(text(
            "SELECT outcome, response FROM hivenet.begin_step(:s, CAST(:r AS jsonb))"),
            {"s": step, "r": '{"amount": 1}'}).one()
        assert tuple(replayed) == ("replayed", {"ok": True})

        durable = SerialRepository(conn).next_durable(
            "unified", system="D0002", module="U01", instance="05")
        assert durable.format == "unified" and durable.fields["system"] == "D0002"


def test_the_application_role_claims_on_a_day_without_partition(
        cluster: Cluster, installed: object) -> None:
    """A day whose partition is missing (maintain() not run) takes the application's claim
    in the default partition: no DDL, no connection, no superuser."""
    with psycopg.connect(cluster.url(OWNER), autocommit=True) as owner:
        day = _scalar(owner, "SELECT to_char(hivenet.now() - interval '1 day', 'YYYYMMDD')")
        owner.execute(f"DROP TABLE IF EXISTS hivenet.interface_call_{day}")
    serial = f"D0001S0104B0001{day}2359590000000001"  # late yesterday: inside the window
    with psycopg.connect(cluster.url(APP), autocommit=True) as app:
        app.execute("SELECT hivenet.claim_interface_serial(%s)", (serial,))
        with pytest.raises(psycopg.Error) as again:
            app.execute("SELECT hivenet.claim_interface_serial(%s)", (serial,))
        assert again.value.sqlstate == "HN020"
    with psycopg.connect(cluster.url(OWNER)) as owner:
        assert _scalar(owner, "SELECT count(*) FROM hivenet.interface_call_default "
                              "WHERE interface_serial = %s", (serial,)) == 1


def test_a_rolled_back_first_use_leaves_a_gap(app_engine: Engine) -> None:
    """SPEC §2 guarantee 2, as the application role: the first serial of a scope vanished
    with its rollback, and the scope does not start over."""
    allocate = text("SELECT hivenet.next_unified_serial('D0003', 'R01', '01')")
    with app_engine.connect() as conn:
        first = conn.execute(allocate).scalar()
        conn.rollback()
        second = conn.execute(allocate).scalar()
        conn.commit()
    assert isinstance(first, str) and isinstance(second, str)
    assert int(second[-10:]) > int(first[-10:])


def test_the_admin_role_maintains(cluster: Cluster, installed: object) -> None:
    with psycopg.connect(cluster.url(OPS)) as conn:
        conn.execute("SELECT hivenet.maintain()")
        assert _scalar(conn, "SELECT count(*) FROM hivenet.setting") > 0


def test_the_application_role_reaches_no_dblink_setting_or_admin_function(
        cluster: Cluster, installed: object) -> None:
    with psycopg.connect(cluster.url(APP), autocommit=True) as conn:
        assert conn.execute("""
            SELECT p.oid::regprocedure::text FROM pg_proc p
            WHERE p.proname LIKE 'dblink%'
              AND has_function_privilege(current_user, p.oid, 'EXECUTE')""").fetchall() == []
        for sql in ("SELECT * FROM hivenet.setting", "SELECT hivenet.maintain()"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql)


def test_a_managed_servers_administrator_bootstraps_its_own_database(
        cluster: Cluster, installed: object) -> None:
    """No superuser at all: an administrator with CREATEROLE creates a database and an owner,
    bootstraps (the roles exist already: they are the cluster's, shared by its databases; on
    PostgreSQL 16 and later it holds ADMIN OPTION on them, as their creator does), and the
    owner installs and serves the schema there."""
    with psycopg.connect(cluster.url(CLOUD_ADMIN, "postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {CLOUD_DATABASE}")
        conn.execute(f"CREATE ROLE {CLOUD_OWNER} LOGIN PASSWORD "
                     f"'{cluster.passwords[CLOUD_OWNER]}'")
        sixteen = conn.info.server_version >= 160000
    if sixteen:  # granting a role needs ADMIN OPTION on it: had by whoever created the roles
        with psycopg.connect(cluster.url(SUPERUSER, "postgres"), autocommit=True) as conn:
            conn.execute(f"GRANT hivenet_app, hivenet_reporting, hivenet_admin TO {CLOUD_ADMIN}"
                         " WITH ADMIN OPTION")
    result = _hivenet_db("bootstrap", "--owner", CLOUD_OWNER, "--url",
                         cluster.url(CLOUD_ADMIN, CLOUD_DATABASE))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "already done: CREATE ROLE hivenet_app NOLOGIN",
        "already done: CREATE ROLE hivenet_reporting NOLOGIN",
        "already done: CREATE ROLE hivenet_admin NOLOGIN",
        f"ran: GRANT CREATE ON DATABASE {CLOUD_DATABASE} TO {CLOUD_OWNER}",
        f"ran: GRANT CREATE ON SCHEMA public TO {CLOUD_OWNER}",
        f"ran: GRANT hivenet_app TO {CLOUD_OWNER} WITH ADMIN OPTION",
        f"ran: GRANT hivenet_reporting TO {CLOUD_OWNER} WITH ADMIN OPTION",
        f"ran: GRANT hivenet_admin TO {CLOUD_OWNER} WITH ADMIN OPTION",
    ]
    migrate = _hivenet_db("migrate", "--prepare", str(SCOPES), "--url",
                          cluster.url(CLOUD_OWNER, CLOUD_DATABASE))
    assert migrate.returncode == 0, migrate.stderr
    allocate = "SELECT hivenet.next_unified_serial('D0004', 'M01', '01')"
    with psycopg.connect(cluster.url(APP, CLOUD_DATABASE)) as conn:  # already in hivenet_app
        assert _scalar(conn, allocate).startswith("D0004M0101")

    # A schema whose grants to the roles are missing (as when it was installed before the
    # roles existed): the administrator may not apply them, so bootstrap leaves the one
    # statement to the owner, who runs it.
    with psycopg.connect(cluster.url(CLOUD_OWNER, CLOUD_DATABASE), autocommit=True) as conn:
        conn.execute("REVOKE USAGE ON SCHEMA hivenet FROM hivenet_app")
    result = _hivenet_db("bootstrap", "--owner", CLOUD_OWNER, "--url",
                         cluster.url(CLOUD_ADMIN, CLOUD_DATABASE))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-2:] == [
        "for the owner: SELECT hivenet._grant_roles()",
        f"left for the owner: connect as {CLOUD_OWNER} and run the statements marked "
        "'for the owner'"]
    with psycopg.connect(cluster.url(CLOUD_OWNER, CLOUD_DATABASE), autocommit=True) as conn:
        conn.execute("SELECT hivenet._grant_roles()")
    with psycopg.connect(cluster.url(APP, CLOUD_DATABASE)) as conn:
        assert _scalar(conn, allocate).startswith("D0004M0101")
    result = _hivenet_db("bootstrap", "--owner", CLOUD_OWNER, "--url",
                         cluster.url(CLOUD_ADMIN, CLOUD_DATABASE))
    assert result.stdout.splitlines()[-1].startswith("nothing to do"), result.stdout


def test_the_cluster_dump_holds_no_secret(cluster: Cluster, installed: object) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["PGPASSWORD"] = cluster.passwords[SUPERUSER]
    dump = subprocess.run(
        [str(find_bin_dir() / "pg_dumpall"), "--no-password", "-h", "127.0.0.1",
         "-p", str(cluster.server.port), "-U", SUPERUSER],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    assert dump.returncode == 0, dump.stderr
    # The dump is the whole cluster: roles (with SCRAM verifiers) and the schema.
    assert f"CREATE ROLE {OWNER};" in dump.stdout and "CREATE SCHEMA hivenet;" in dump.stdout
    for role, password in cluster.passwords.items():
        assert password not in dump.stdout, f"the password of {role} is in the dump"
    assert "dblink" not in dump.stdout.lower()
    assert "loopback_dsn" not in dump.stdout.lower()
