"""What the command accepts: each command's name, help, examples and options, and the
function that runs it, named ``"module:function"`` in this package and imported only when the
command runs, so that ``hivenet-db --help`` and ``--version`` load neither SQLAlchemy nor
psycopg nor rich. Options are spelled with hyphens; a value argparse can check (a count, a
port, NAME=VALUE) is checked here, so that its mistake is a usage error."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from hivenet_db.cli.parser import Commands

# Options that name a serial field directly; any other field goes through --field NAME=VALUE.
FIELD_OPTIONS = ("system", "module", "instance", "target", "merchant", "shard")
SCOPE_EXAMPLE = "--system C0001 --module A01 --instance 01"


def _number(value: str, low: int, high: int, expected: str) -> int:
    if not (value.isascii() and value.isdigit() and low <= int(value) <= high):
        raise argparse.ArgumentTypeError(f"{value!r}: expected {expected}")
    return int(value)


def positive(value: str) -> int:
    return _number(value, 1, sys.maxsize, "a whole number, at least 1")


def port(value: str) -> int:
    return _number(value, 1, 65535, "a TCP port, 1 to 65535")


def name_value(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{item!r}: expected NAME=VALUE")
    return name, value


def add_shard_options(p: argparse.ArgumentParser) -> None:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--shards", metavar="URL,URL", help="run on each of these databases "
                       "(shards shard0, shard1, ...) and merge the rows, each with its shard")
    group.add_argument("--shard-map", metavar="FILE", help="run on each shard of this shard "
                       "map (its \"shards\": name → URL; docs/guides/scale-out.md) and merge")


def _install(commands: Commands) -> None:
    p = commands.add(
        "bootstrap", "install:cmd_bootstrap", "once, as a superuser or administrator: roles "
        "hivenet_app, hivenet_reporting and hivenet_admin, and the rights the schema owner "
        "needs",
        examples=["bootstrap --owner hivenet_owner --url postgresql://postgres@db/app"],
        description="Create roles hivenet_app, hivenet_reporting and hivenet_admin (NOLOGIN) "
        "if missing, grant OWNER CREATE on this database (for schema hivenet) and on schema "
        "public (for its version table) and the three roles WITH ADMIN OPTION; one line per "
        "action. "
        "Safe to run again. Then OWNER runs `hivenet-db migrate` and grants the roles to "
        "login roles. OWNER must exist: CREATE ROLE owner LOGIN PASSWORD '...'.")
    p.add_argument("--owner", required=True, metavar="ROLE",
                   help="the role that will own schema hivenet (runs migrate)")

    p = commands.add(
        "migrate", "install:cmd_migrate", "create or upgrade schema hivenet (alembic, version "
        "table hivenet_alembic_version); --check tells where it stands",
        examples=["migrate --time-zone Asia/Shanghai --prepare scopes.txt",
                  "migrate --owns-instances 01-09 --url postgresql://owner@shard0/app",
                  "migrate --check --url postgresql://owner@db/app"],
        description="Create or upgrade schema hivenet to --revision (alembic, version table "
        "hivenet_alembic_version). With --check, change nothing: print whether the database "
        "is at the package's head, behind it, ahead of it (a revision this package does not "
        "know: upgrade the package) or not installed, and exit 0 at head, 3 behind, 4 ahead, "
        "5 not installed, 6 untracked (schema hivenet whose revision is not recorded).")
    p.add_argument("--revision", default="head", help="target revision (default: head)")
    p.add_argument("--check", action="store_true",
                   help="only tell where the database stands (exit status above)")
    p.add_argument("--time-zone", metavar="ZONE", help=(
        "then set the business time zone of the serials' dates (setting time_zone, e.g. "
        "Asia/Shanghai; default UTC); choose it before the first serial: once serials exist "
        "the database refuses a zone behind the current one (HN001)"))
    p.add_argument("--owns-instances", metavar="INSTANCES", help=(
        "then declare the instances this database allocates for, e.g. 01-09 or 01,03,05 "
        "(the instance field; the shard field of id_service), for several primaries: "
        "others raise HN002 (docs/guides/scale-out.md); 'all' (the default) is one primary"))
    p.add_argument("--single-primary-formats", action="store_true", default=None, help=(
        "with --owns-instances: this database is the one that issues the formats without "
        "an instance field (merchant_trade, per_second)"))
    p.add_argument("--prepare", metavar="FILE", help=(
        "then prepare the scopes of FILE, one a line as for `hivenet-db prepare --file` "
        "(such as C0001 A01 01-99), so that each counts from 1 from its first serial"))

    p = commands.add("downgrade", "install:cmd_downgrade", "go back to an older revision",
                     examples=["downgrade -1"],
                     description="Go back to REVISION. `base` removes schema hivenet and all "
                     "its data.")
    p.add_argument("revision", help="target revision: 0003, -1, base ...")

    commands.add("sql", "install:cmd_sql", "print the full schema SQL (for teams that do not "
                 "use alembic)", examples=["sql > hivenet.sql"])


def _prepare(commands: Commands) -> None:
    p = commands.add(
        "prepare", "prepare:cmd_prepare", "give counter scopes their own sequences before "
        "their first use, so that each counts from 1",
        examples=["prepare C0001 A01 01-99",
                  "prepare unified C0001 A01 01",
                  "prepare id_service merchant=123456789012,shard=07",
                  "prepare --file scopes.txt"],
        description="Prepare the scopes named: a channel SYSTEM MODULE INSTANCES (an instance "
        "or a range such as 01-99) in the standard's three kinds (unified, system, "
        "interface), or in FORMAT when a format comes first; NAME=VALUE,... or a JSON object: "
        "the fields of one scope's counter (a value NN-NN is a range). --file: one such line "
        "a line (# comments); a format alone before --file, or --format, stands for the lines "
        "that name none. In transactions of 500 scopes, with a progress bar on stderr. A "
        "scope prepared already is left as it is. With the defaults an allocation for a scope "
        "that is not prepared is refused (HN002), unless its format shares a fallback counter "
        "(setting shared_fallback: docs/guides/formats.md). register_module prepares the "
        "instances this database owns.")
    p.add_argument("scope", nargs="*", metavar="[FORMAT] SCOPE",
                   help="SYSTEM MODULE INSTANCES, NAME=VALUE,NAME=VALUE or a JSON object")
    p.add_argument("--file", metavar="PATH", help="scopes, one a line (# comments)")
    p.add_argument("--format", action="append", metavar="NAME",
                   help="format to prepare the scopes in (repeatable; default: unified, "
                   "system, interface)")


def _serials(commands: Commands) -> None:
    p = commands.add(
        "next", "serials:cmd_next", "issue serials (committed before they are printed)",
        examples=[f"next unified {SCOPE_EXAMPLE}",
                  f"next interface {SCOPE_EXAMPLE} --target B0001 -n 100 --json",
                  "next time_id -n 3"],
        description="Issue COUNT serials of FORMAT: unified, system, interface, id_service, "
        "merchant_trade, per_second, time_id (numeric ids: (yyMMddHHmmss << 14) | seq) or a "
        "custom format. Prints one serial per line; --json: "
        "one JSON object per line (JSON Lines) with the parsed fields too. Serials are "
        "committed and printed 10,000 at a time, so output streams whatever the count (after "
        "a failure, the serials printed are issued). With a terminal on stderr, a progress "
        "bar shows how many are issued.")
    p.add_argument("format", help="unified | system | interface | <format name>")
    for name in FIELD_OPTIONS:
        p.add_argument(f"--{name}", help=f"field {name}")
    p.add_argument("--field", action="append", type=name_value, metavar="NAME=VALUE",
                   help="any other field of a custom format (repeatable)")
    p.add_argument("--count", "-n", type=positive, default=1,
                   help="how many serials (default 1)")

    p = commands.add(
        "parse", "serials:cmd_parse", "show the format and fields of a serial",
        examples=["parse C0001A0101201507100123456789", "parse 4102768558080001"],
        description="Parse SERIAL. Without --format the standard's kinds are told apart by "
        "length (28 unified, 30 system, 39 interface), and any other number is a time id of "
        "format time_id.")
    p.add_argument("serial")
    p.add_argument("--format", help="format name (needed for other formats)")


def _report(commands: Commands) -> None:
    p = commands.add(
        "report", "report:cmd_report", "call chain, step and request states, stuck ones, usage and "
        "headroom",
        examples=["report --unified C0001A0101201507100123456789 --limit 20",
                  "report --shards postgresql://app@shard0/pay,postgresql://app@shard1/pay"],
        description="Print the business time zone (its name, offset and local time: every "
        "time the report prints is in it) and each reporting section this database "
        "has: the call chain of --unified, per-scope usage and headroom of the current "
        "period (the scopes in use first, the least headroom first), interface calls per "
        "day, steps per state and stuck steps, keyed requests per state and stuck keyed "
        "requests. With --shards or --shard-map: on every shard, the rows merged with a first "
        "column shard (docs/guides/scale-out.md).")
    p.add_argument("--unified", metavar="SERIAL", help="list the call chain of this unified "
                   "serial")
    p.add_argument("--limit", type=int, default=50, help="rows per section, saying how many "
                   "more there are (default 50; per shard with --shards)")
    add_shard_options(p)

    commands.add(
        "metrics", "report:cmd_metrics", "print Prometheus metrics: usage and headroom, stuck "
        "steps, steps, claims, interface calls and partitions",
        examples=["metrics > /var/lib/node_exporter/textfile/hivenet.prom"],
        description="Print the metrics of hivenet_db.metrics in the Prometheus text exposition "
        "format (--json: as a list of metrics), for a textfile collector or a quick look; an "
        "application serves them on its own endpoint with hivenet_db.metrics.HivenetCollector "
        "(pip install 'hivenet-db[metrics]'). Alert rules: docs/operations.md.")


def _maintain(commands: Commands) -> None:
    p = commands.add("maintain", "maintain:cmd_maintain", "run hivenet.maintain() (partitions, "
                     "retention); run it every few minutes",
                     examples=["maintain --url postgresql://owner@db/app",
                               "maintain --shard-map shards.json"],
                     description="Run hivenet.maintain() (partitions, retention); run it "
                     "every few minutes. Prints when it finished, in the business time zone "
                     "with its offset. With --shards or --shard-map: on every shard, each "
                     "in its own transaction.")
    add_shard_options(p)

    p = commands.add(
        "failover-fence", "maintain:cmd_failover_fence", "on a promoted standby, before it takes "
        "traffic: move every counter past what the old primary may have issued",
        examples=["failover-fence --gap 1000000 --url postgresql://admin@new-primary/app"],
        description="Run hivenet.fence_failover(): move every counter (scope sequences, "
        "shared fallback counters) forward by --gap, so that a standby promoted after an "
        "asynchronous failover never issues a serial its old primary issued in the WAL it "
        "never got. Its first allocation does the same with the setting failover_gap; this "
        "fences before traffic (an HA manager's hook: docs/operations.md, Failover). Choose "
        "the gap >= peak serials per second of one format x the longest stretch of commits a "
        "failover loses. Does nothing when this timeline was fenced already (--force fences "
        "again). Counters whose period cannot hold the gap are parked (HN010 until their next "
        "period) and listed.")
    p.add_argument("--gap", type=int, default=None,
                   help="how far to move each counter (default: the setting failover_gap)")
    p.add_argument("--force", action="store_true",
                   help="fence again although this timeline was fenced already")


def _audit(commands: Commands) -> None:
    p = commands.add(
        "audit", "audit:cmd_audit", "check the audit chain of a namespace of keyed requests",
        examples=["audit verify payments --url postgresql://admin@db/app"],
        description="Check the hash chain of NAMESPACE (set_namespace_policy(namespace, "
        "audit_chain => true)) with hivenet.verify_audit_chain: exit status 0 and \"chain "
        "of N attempts intact\" with the chain's head (keep it elsewhere: a chain rewritten "
        "after a change gives another head), or 3 naming the first changed or deleted "
        "attempt (docs/guides/idempotency.md, Audit).")
    p.add_argument("action", choices=("verify",))
    p.add_argument("namespace", help="the namespace whose chain to check")


def _proxy(commands: Commands) -> None:
    p = commands.add(
        "proxy", "proxy:cmd_proxy", "install a PL/Proxy database that routes the hivenet "
        "functions to the shards owning each instance (calls through it commit on their own)",
        examples=["proxy install --shards postgresql://admin@shard0/app,"
                  "postgresql://admin@shard1/app --url postgresql://postgres@proxyhost/proxy"],
        description="Install (again: safe) PL/Proxy in the database of --url and, in its schema "
        "hivenet, one function per function of the application API, same names and "
        "signatures, each running on the shard that owns the instance of its serial or scope "
        "(claims and keyed requests: by the key's hash). What each shard owns is read from "
        "the shard (hivenet-db migrate --owns-instances); --owns for shards without it. Each "
        "call commits on its own on the shard, whatever the caller's transaction does: for "
        "callers without a transaction of their own (docs/guides/plproxy.md). Needs PL/Proxy on "
        "the proxy's server (apt-get install postgresql-15-plproxy) and a superuser there. "
        "No password is stored: PL/Proxy connects as the calling role (.pgpass or trust on "
        "the proxy's server).")
    p.add_argument("action", choices=("install",))
    p.add_argument("--shards", required=True, metavar="URL,URL,...",
                   help="the shards' database URLs, in a fixed order (shard 0 first)")
    p.add_argument("--owns", action="append", metavar="INSTANCES",
                   help="for shards whose schema has no ownership setting: the instances each "
                        "owns, once per shard in the order of --shards (e.g. --owns 01-49 "
                        "--owns 50-99); default: 00-99 split evenly")


def _demo(commands: Commands) -> None:
    p = commands.add(
        "demo", "demo:cmd_demo", "replay the standard's two examples end to end",
        examples=["demo --json", "demo --port 5499 --keep"],
        description="Replay the HiveNet Sequence Standards' examples: a transaction crossing "
        "three systems, then a failed step retried with the same system serial; shows a "
        "duplicate call rejected, a retry replayed and the call chain. Without a database URL "
        "it starts a local PostgreSQL of its own, in a new directory it names (never the "
        "embedded server of the other commands), and stops and removes it at the end unless "
        "--keep; with --url its rows stay in that database, so `hivenet-db report` shows them "
        "afterwards.")
    p.add_argument("--port", type=port, help="the demo's own server listens on this port "
                   "(default: a free one)")
    p.add_argument("--keep", action="store_true", help="leave the demo's own server running "
                   "with its data, and say how to reach and stop it")


def _bench(commands: Commands) -> None:
    p = commands.add("bench", "bench:cmd_bench", "run the benchmarks (arguments go to the "
                     "benchmark runner)", examples=["bench --list", "bench --quick",
                                                    "bench --rounds 3 --python --json"])
    p.add_argument("bench_args", nargs=argparse.REMAINDER, metavar="OPTIONS",
                   help="the benchmark runner's options (bench --help lists them)")


def _embedded(commands: Commands) -> None:
    p = commands.add(
        "embedded", "embedded:cmd_embedded", "status, start or stop the embedded local "
        "PostgreSQL",
        examples=["embedded status --json", "embedded start --port 5433"],
        description="Manage the local PostgreSQL used when no URL is given. Its directory: "
        "$HIVENET_EMBEDDED_DIR, else /var/lib/hivenet-db/embedded as root (which says so, "
        "with the user the server runs as), else ~/.local/share/hivenet-db/embedded. It "
        "listens on 127.0.0.1, on a free port chosen at its first start unless --port says.")
    p.add_argument("action", choices=("status", "start", "stop"))
    p.add_argument("--port", type=port, help="with start: listen on this port (a running "
                   "server is restarted on it)")


# In the order `hivenet-db --help` lists them.
GROUPS: tuple[Callable[[Commands], None], ...] = (
    _install, _prepare, _serials, _report, _maintain, _audit, _proxy, _demo, _bench,
    _embedded)
