"""examples/django_project, driven as its users run it: ``manage.py migrate`` on an empty
database as its owner (schema hivenet by the app's migration, then the shop's tables),
``manage.py check`` and the WSGI application (``serve.py``) as the application's login,
concurrent duplicate orders over HTTP, a retry replayed, and the operator's commands."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

pytest.importorskip("django", reason="hivenet_db.django needs the extra [django]")

from hivenet_db import parse_serial
from hivenet_db.tools import migrate
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres

PROJECT = Path(__file__).resolve().parent.parent / "examples" / "django_project"
DATABASE = "django_example_shop"


def manage(url: str, *args: str, status: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=PROJECT, text=True,
                          capture_output=True, timeout=120,
                          env={**os.environ, "SHOP_DATABASE_URL": url})
    assert done.returncode == status, done.stderr
    return done


def as_login(url: str, login: str, password: str | None) -> str:
    parts = urllib.parse.urlsplit(url)
    user = login if password is None else f"{login}:{urllib.parse.quote(password, safe='')}"
    return parts._replace(netloc=f"{user}@{parts.hostname}:{parts.port}").geturl()


@pytest.fixture
def shop(hivenet_server: EmbeddedPostgres, hivenet_logins: dict[str, str]) -> Iterator[str]:
    """The shop's empty database; its owner's URL."""
    with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(DATABASE)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    try:
        yield hivenet_server.url(DATABASE)
    finally:
        with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(
                sql.Identifier(DATABASE)))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def order(port: int, key: str, body: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/orders", json.dumps(body).encode(), method="POST",
        headers={"Idempotency-Key": f'"{key}"', "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, \
                response.read()
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def test_the_example_shop_takes_each_order_once(shop: str, hivenet_server: EmbeddedPostgres,
                                                hivenet_logins: dict[str, str]) -> None:
    manage(shop, "migrate", "--verbosity", "0")  # as the owner: schema hivenet, then the shop
    assert migrate.status(shop).state is migrate.State.HEAD
    app = as_login(shop, hivenet_logins["hivenet_app"], hivenet_server.password)
    checked = manage(app, "check", "--database", "default")
    assert "hivenet." not in checked.stdout + checked.stderr  # nothing missing for the login

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "serve.py", str(port)],
        cwd=PROJECT, env={**os.environ, "SHOP_DATABASE_URL": app},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, \
                    server.stderr.read() if server.stderr else "runserver did not start"
                time.sleep(0.1)
        with ThreadPoolExecutor(8) as pool:  # 8 clients send the same order at once
            answers = list(pool.map(lambda _: order(port, "order-7", {"sku": "tea",
                                                                      "amount": 250}),
                                    range(8)))
        retry = order(port, "order-7", {"sku": "tea", "amount": 250})
        changed = order(port, "order-7", {"sku": "tea", "amount": 999})
    finally:
        server.terminate()
        server.communicate(timeout=30)

    statuses = [status for status, _, _ in answers]
    assert statuses.count(201) >= 1 and set(statuses) <= {201, 409}, statuses
    created = [json.loads(body) for status, headers, body in answers
               if status == 201 and headers["idempotent-replayed"] == "false"]
    assert len(created) == 1, answers  # one run of the view; other 201s are replays
    assert parse_serial(created[0]["order"]).format == "unified"
    # The channel of HIVENET["PREPARE"], prepared by migrate: its first serial of each kind.
    assert created[0]["order"].endswith("0000000001"), created
    assert created[0]["payment"].endswith("000000000001"), created
    assert created[0]["paid"] == 250
    assert retry[0] == 201 and json.loads(retry[2]) == created[0]
    assert retry[1]["idempotent-replayed"] == "true"
    assert changed[0] == 422
    with psycopg.connect(shop) as conn:
        assert conn.execute("SELECT count(*) FROM orders_order").fetchone() == (1,)
        assert conn.execute("SELECT serial, amount FROM orders_payment").fetchall() == \
            [(created[0]["payment"], 250)]
        assert conn.execute("SELECT state::text FROM hivenet.request_attempt "
                            "WHERE namespace = 'shop'").fetchall() == [("success",)]

    assert manage(shop, "hivenet_maintain").stdout.startswith("maintain: done at ")
    assert "# TYPE hivenet_" in manage(shop, "hivenet_metrics").stdout


def test_the_commands_fail_with_the_cli_s_one_line(shop: str, hivenet_server: EmbeddedPostgres,
                                                   hivenet_logins: dict[str, str]) -> None:
    """manage.py hivenet_maintain / hivenet_metrics print what `hivenet-db` would: one line
    naming the cause and what to do, exit status 2, not a traceback."""
    manage(shop, "migrate", "hivenet", "--verbosity", "0")
    app = as_login(shop, hivenet_logins["hivenet_app"], hivenet_server.password)
    refused = manage(app, "hivenet_maintain", status=2)
    assert refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith("CommandError: permission denied for function maintain: "
                                     f"role {hivenet_logins['hivenet_app']} lacks a privilege "
                                     "that `hivenet-db maintain` needs in "
                                     f"{DATABASE}"), refused.stderr
    gone = urllib.parse.urlsplit(shop)._replace(netloc=f"nobody@127.0.0.1:{free_port()}")
    unreachable = manage(gone.geturl(), "hivenet_metrics", status=2)
    assert unreachable.stderr.count("\n") == 1, unreachable.stderr
    assert unreachable.stderr.startswith("CommandError: cannot reach PostgreSQL at 127.0.0.1:")
    assert "--traceback" not in unreachable.stderr
    assert "Traceback" in manage(gone.geturl(), "hivenet_metrics", "--traceback",
                                 status=1).stderr


def test_the_guide_quotes_the_example_project() -> None:
    """Each Python block of docs/guides/django.md is a verbatim excerpt of the example project, so
    the test above runs what the guide shows."""
    guide = (PROJECT.parent.parent / "docs" / "guides" / "django.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    sources = [path.read_text(encoding="utf-8") for path in PROJECT.rglob("*.py")]
    assert len(blocks) == 3
    for block in blocks:
        assert any(block in source for source in sources), block
