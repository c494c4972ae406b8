"""Who began an attempt, behind PgBouncer 1.18 in transaction pooling: what the caller
columns of the audit (called_by, application_name, client_addr) record when applications
share one server session, and what the settings docs/operations.md ("Connection poolers")
names make them record.

Measured here, as the docs say it:
- called_by is the login of the server session: the pool's, when the PgBouncer database
  connects as a user of its own, whoever the client logged in as; ``SET LOCAL ROLE`` in the
  transaction records the role acting;
- application_name is the client's own when it gives one (at connect, or with ``SET``:
  PgBouncer restores it on the session before each transaction of that client, or with
  ``SET LOCAL`` for one transaction); a client that gives none records whatever the session
  holds: the name of the client before it;
- client_addr is the pooler's address (127.0.0.1 here, though the clients came over a Unix
  socket and have none); with ``application_name_add_host = 1`` PgBouncer appends each
  client's address and port to the application_name it gives, ``app`` for a client without
  one, until the client sets a name itself.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from hivenet_db import RequestRepository
from hivenet_db.tools.embedded_postgres import SUPERUSER, EmbeddedPostgres
from tests.servers import Bouncer, started_pgbouncer

SHARED = "shared"  # the one PgBouncer database of the applications, one server session
NAMESPACE = "pooled"
ACTING_ROLE = "hivenet_pooled_payments"  # what the payments service acts as, per transaction


@pytest.fixture
def server_login(hivenet_logins: dict[str, str]) -> str:
    """The login of the pool's server session: granted hivenet_app only."""
    return hivenet_logins["hivenet_app"]


@pytest.fixture
def acting_role(hivenet_server: EmbeddedPostgres, server_login: str) -> Iterator[str]:
    with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {ACTING_ROLE}")
        conn.execute(f"CREATE ROLE {ACTING_ROLE} NOLOGIN IN ROLE hivenet_app")
        conn.execute(f"GRANT {ACTING_ROLE} TO {server_login}")
        yield ACTING_ROLE
        conn.execute(f"DROP ROLE {ACTING_ROLE}")


@contextlib.contextmanager
def shared_pool(server: EmbeddedPostgres, url: str, login: str,
                **settings: str) -> Iterator[Bouncer]:
    """PgBouncer whose database SHARED connects to ``url``'s database as ``login`` with one
    server session, whoever the client logs in as (payments, refunds, reports)."""
    entry = (f"host=127.0.0.1 port={server.port} dbname={urlsplit(url).path.lstrip('/')} "
             f"user={login} pool_size=1")
    try:
        with started_pgbouncer(server.port, users=(SUPERUSER, "payments", "refunds", "reports"),
                               databases={SHARED: entry}, settings=settings) as bouncer:
            yield bouncer
    except FileNotFoundError as missing:
        pytest.fail(str(missing))


def client(bouncer: Bouncer, login: str, *, over_tcp: bool = False,
           **params: Any) -> psycopg.Connection:
    """An application's connection to SHARED: over PgBouncer's Unix socket (no address of
    its own), or over TCP."""
    host = "127.0.0.1" if over_tcp else str(bouncer.socket_dir)
    return psycopg.connect(host=host, port=bouncer.port, user=login, dbname=SHARED,
                           prepare_threshold=None, **params)


def begin_key(conn: psycopg.Connection, key: str, first: str | None = None) -> int:
    """Begin ``key`` in a transaction of its own (after statement ``first``); the server
    process it ran on."""
    if first is not None:
        conn.execute(first)
    RequestRepository(conn).begin(NAMESPACE, key, {"amount": 5})
    row = conn.execute("SELECT pg_backend_pid()").fetchone()
    conn.commit()
    assert row is not None
    return int(row[0])


def recorded(url: str) -> dict[str, tuple[str, str | None, str | None]]:
    """key → (called_by, application_name, client_addr) of each attempt."""
    with psycopg.connect(url) as conn:
        return {key: (called_by, name, addr) for key, called_by, name, addr in conn.execute(
            "SELECT key, called_by, application_name, host(client_addr) "
            "FROM hivenet.request_attempts WHERE namespace = %s", (NAMESPACE,))}


def local_port(conn: psycopg.Connection) -> int:
    """The port of the client's end of its TCP connection to PgBouncer."""
    with socket.fromfd(conn.fileno(), socket.AF_INET, socket.SOCK_STREAM) as sock:
        return int(sock.getsockname()[1])


def test_two_applications_sharing_one_server_session(
        hivenet_server: EmbeddedPostgres, hivenet_url: str, server_login: str,
        acting_role: str) -> None:
    with shared_pool(hivenet_server, hivenet_url, server_login) as bouncer, \
            client(bouncer, "payments", application_name="payments") as payments, \
            client(bouncer, "refunds", application_name="refunds") as refunds, \
            client(bouncer, "reports") as reports:  # gives no application_name
        sessions = {
            begin_key(payments, "p1"),
            begin_key(refunds, "r1"),
            begin_key(reports, "n1"),  # right after refunds, on its session
            begin_key(payments, "p2"),
            begin_key(reports, "n2"),  # right after payments
            begin_key(payments, "p3", f"SET LOCAL ROLE {acting_role}"),
            begin_key(reports, "n3", "SET LOCAL application_name = 'reports'"),
            begin_key(refunds, "r2"),
        }
    assert len(sessions) == 1  # every transaction on the one server session
    pooler = "127.0.0.1"
    assert recorded(hivenet_url) == {
        "p1": (server_login, "payments", pooler),
        "r1": (server_login, "refunds", pooler),
        "n1": (server_login, "refunds", pooler),  # the client before it
        "p2": (server_login, "payments", pooler),
        "n2": (server_login, "payments", pooler),  # the client before it
        "p3": (acting_role, "payments", pooler),
        "n3": (server_login, "reports", pooler),
        "r2": (server_login, "refunds", pooler),
    }


def test_application_name_add_host_records_each_clients_address(
        hivenet_server: EmbeddedPostgres, hivenet_url: str, server_login: str) -> None:
    with shared_pool(hivenet_server, hivenet_url, server_login,
                     application_name_add_host="1") as bouncer, \
            client(bouncer, "payments", over_tcp=True, application_name="payments") as payments, \
            client(bouncer, "reports", over_tcp=True) as reports:
        begin_key(payments, "p1")
        begin_key(reports, "n1")
        begin_key(payments, "p2", "SET application_name = 'payments-batch'")
        begin_key(payments, "p3")
        ports = {"payments": local_port(payments), "reports": local_port(reports)}
    assert {key: name for key, (_, name, _) in recorded(hivenet_url).items()} == {
        "p1": f"payments - 127.0.0.1:{ports['payments']}",
        "n1": f"app - 127.0.0.1:{ports['reports']}",  # its own, not the client's before it
        "p2": "payments-batch",  # a name the client sets itself is kept as it is
        "p3": "payments-batch",
    }
