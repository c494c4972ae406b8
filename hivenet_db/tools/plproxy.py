"""``hivenet-db proxy install``: a PL/Proxy database in front of several shards
(docs/guides/plproxy.md).

The proxy database gets the extension plproxy, the schema ``hivenet_proxy`` (which shard owns
which instance, the routing functions: ``plproxy_sql/routing.sql`` beside this module) and,
in schema ``hivenet``, one PL/Proxy function per function of the application API with the same
name and signature (``plproxy_sql/functions.sql``), so callers change only their URL. What each
shard owns is read from the shard (its setting ``owned_instances``); shards of a schema without
ownership take it from ``owns`` (``--owns``) or get 00-99 spread evenly.

Every call through the proxy commits on its own on the shard (docs/guides/plproxy.md). Running the
install again rewrites the routing from the shards as they are now; it never changes a shard.
No password is stored in the proxy database nor shown: PL/Proxy connects as the calling role,
authenticated by the proxy server's ``.pgpass`` or by trust.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from hivenet_db.shards import expand_instances
from hivenet_db.tools.dburl import connect
from hivenet_db.urls import libpq_url

NODES = range(100)  # the instance field (01-99) and the shard field of id_service (00-99)
CLUSTER = "hivenet_shards"


def apt_package(major: int) -> str:
    """The Debian / Ubuntu (and PGDG) package of PL/Proxy for server version ``major``."""
    return f"postgresql-{major}-plproxy"


class ProxyError(Exception):
    """The proxy cannot be installed as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Shard:
    number: int
    label: str  # host:port/dbname: what messages show, never a password
    connstr: str  # libpq key=value without user nor password: what the proxy stores
    owned: str  # canonical: '00-49', '50-99,07'
    single_primary: bool  # issues the formats without a node field (merchant_trade, ...)
    source: str  # where `owned` came from: "the shard", "--owns", "spread evenly"


def sql_file(name: str) -> str:
    return (resources.files("hivenet_db.tools") / "plproxy_sql" / name).read_text(encoding="utf-8")


def nodes_of(text: str) -> set[int]:
    """'01-09,12' → {1, ..., 9, 12}; 'all' → 00-99. ProxyError when malformed."""
    try:
        return {int(instance) for instance in expand_instances(text)}
    except ValueError as error:
        raise ProxyError(str(error)) from None


def canonical(nodes: set[int]) -> str:
    """{1, 2, 3, 7} → '01-03,07' (as the shards write their setting owned_instances)."""
    runs: list[str] = []
    for n in sorted(nodes):
        if runs and int(runs[-1][-2:]) == n - 1:
            runs[-1] = f"{runs[-1][:2]}-{n:02d}"
        else:
            runs.append(f"{n:02d}")
    return ",".join(runs)


def spread(count: int) -> list[str]:
    """00-99 in ``count`` contiguous blocks, the first ones one larger when it does not divide."""
    size, extra = divmod(len(NODES), count)
    blocks, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        blocks.append(canonical(set(range(start, end))))
        start = end
    return blocks


def shard_of_key(key: str, shards: int) -> int:
    """The shard a claim or keyed request of ``key`` goes to through a proxy of ``shards``
    shards (hivenet_proxy.partition_of_key: the first 28 bits of the key's md5, modulo)."""
    return int(hashlib.md5(key.encode()).hexdigest()[:7], 16) % shards


def connstr_of(url: str) -> tuple[str, str]:
    """The shard's libpq connstr as the proxy stores it (no user, no password; dbname
    written out, since without a user it would default to another one) and its label."""
    params = {k: v for k, v in conninfo_to_dict(libpq_url(url)).items() if v is not None}
    user = params.pop("user", None)
    params.pop("password", None)
    params.pop("passfile", None)
    if "dbname" not in params and user:
        params["dbname"] = user
    label = f"{params.get('host', 'localhost')}:{params.get('port', '5432')}/" \
            f"{params.get('dbname', '')}"
    return make_conninfo(**{k: str(v) for k, v in params.items()}), label


def read_shards(shard_urls: Sequence[str], owns: Sequence[str] | None = None,
                progress: Callable[[str], None] = lambda _msg: None) -> list[Shard]:
    """Each shard's ownership, read from the shard (``owns``/spread for schemas without it);
    ProxyError when two shards own the same instance or one owns 'all' beside others."""
    if not shard_urls:
        raise ProxyError("give at least one shard (--shards URL,URL,...)")
    if owns is not None and len(owns) != len(shard_urls):
        raise ProxyError(f"--owns given {len(owns)} times for {len(shard_urls)} shards: give it "
                         f"once per shard, in the order of --shards")
    even = spread(len(shard_urls))
    shards: list[Shard] = []
    for number, url in enumerate(shard_urls):
        connstr, label = connstr_of(url)
        setting = _ownership_settings(url, label)
        given = canonical(nodes_of(owns[number])) if owns is not None else None
        if setting is not None:
            owned, single = setting
            source = "the shard"
            if owned == "all" and len(shard_urls) > 1:
                raise ProxyError(
                    f"shard {number} ({label}) owns all instances (setting owned_instances "
                    f"'all'): with several shards, declare on each what it owns (hivenet-db "
                    f"migrate --owns-instances 01-49 --url ..., docs/guides/scale-out.md), then "
                    f"run the install again")
            owned = canonical(nodes_of(owned))
            if given is not None and given != owned:
                raise ProxyError(f"--owns {given} for shard {number} ({label}), but the shard "
                                 f"owns {owned} (setting owned_instances): leave --owns out, "
                                 f"the shard's own setting is used")
        else:
            owned, single = given or even[number], number == 0
            source = "--owns" if given is not None else "spread evenly"
        shards.append(Shard(number, label, connstr, owned, single, source))
        progress(f"shard {number}: {label} owns instances {owned} ({source})"
                 + ("; issues the formats without a node field" if single else ""))
    seen: dict[int, int] = {}
    for shard in shards:
        for node in nodes_of(shard.owned):
            if node in seen:
                raise ProxyError(f"instance {node:02d} is owned by shard {seen[node]} "
                                 f"({shards[seen[node]].label}) and by shard {shard.number} "
                                 f"({shard.label}): each instance belongs to one shard")
            seen[node] = shard.number
    return shards


def _ownership_settings(url: str, label: str) -> tuple[str, bool] | None:
    """(owned_instances, single_primary_formats) of a shard, None when its schema has no
    ownership yet; ProxyError when it has no hivenet schema."""
    try:
        with connect(url, autocommit=True, connect_timeout=10) as conn:
            if conn.execute("SELECT to_regclass('hivenet.setting')").fetchone() == (None,):
                raise ProxyError(f"shard {label} has no hivenet schema: run hivenet-db migrate "
                                 f"on it first")
            values: dict[str, str] = dict(conn.execute(
                "SELECT name, value FROM hivenet.setting "
                "WHERE name IN ('owned_instances', 'single_primary_formats')").fetchall())
    except psycopg.OperationalError as error:
        raise ProxyError(f"cannot connect to shard {label}: {_first_line(error)}") from None
    if "owned_instances" not in values:
        return None
    return values["owned_instances"], values.get("single_primary_formats") == "true"


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def install(proxy_url: str, shard_urls: Sequence[str], *, owns: Sequence[str] | None = None,
            progress: Callable[[str], None] = lambda _msg: None) -> list[Shard]:
    """Install (or refresh) the proxy in database ``proxy_url`` for ``shard_urls``, in one
    transaction, then check through the proxy that every shard answers as itself."""
    shards = read_shards(shard_urls, owns, progress)
    _, proxy_label = connstr_of(proxy_url)
    try:
        conn = connect(proxy_url, connect_timeout=10)
    except psycopg.OperationalError as error:
        raise ProxyError(f"cannot connect to the proxy database {proxy_label}: "
                         f"{_first_line(error)}") from None
    with conn:
        if conn.execute("SELECT to_regclass('hivenet.setting')").fetchone() != (None,):
            raise ProxyError(f"{proxy_label} holds the hivenet schema of a shard: the proxy "
                             f"needs a database of its own (its schema hivenet holds only "
                             f"PL/Proxy functions)")
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS plproxy")
        except (psycopg.errors.FeatureNotSupported, psycopg.errors.UndefinedFile) as error:
            raise ProxyError(f"PL/Proxy is not installed on the proxy's server: apt-get install "
                             f"{apt_package(conn.info.server_version // 10000)} "
                             f"({_first_line(error)})") from None
        except psycopg.errors.InsufficientPrivilege as error:
            raise ProxyError(f"creating the extension plproxy needs a superuser on "
                             f"{proxy_label} ({_first_line(error)})") from None
        conn.execute(sql_file("routing.sql"))
        conn.execute("DELETE FROM hivenet_proxy.shard")
        for shard in shards:
            conn.execute("INSERT INTO hivenet_proxy.shard VALUES (%s, %s, %s, %s, %s)",
                         (shard.number, shard.connstr, shard.label, shard.owned,
                          shard.single_primary))
            conn.execute("INSERT INTO hivenet_proxy.owner SELECT to_char(n, 'FM00'), %s "
                         "FROM unnest(%s::int[]) AS n",
                         (shard.number, sorted(nodes_of(shard.owned))))
        conn.execute("SELECT hivenet_proxy.configure()")
        conn.execute(sql_file("functions.sql"))
        partitions = conn.execute("SELECT count(*) FROM pg_options_to_table("
                                  "(SELECT srvoptions FROM pg_foreign_server "
                                  "WHERE srvname = %s))", (CLUSTER,)).fetchone()
    progress(f"proxy installed in {proxy_label}: {len(shards)} shard(s), cluster {CLUSTER} of "
             f"{partitions[0] if partitions else '?'} PL/Proxy partitions")
    _check_reach(proxy_url, shards, progress)
    return shards


def _check_reach(proxy_url: str, shards: Sequence[Shard],
                 progress: Callable[[str], None]) -> None:
    with connect(proxy_url, autocommit=True) as conn:
        for shard in shards:
            try:
                row = conn.execute("SELECT database, port, owned FROM hivenet_proxy.reach(%s)",
                                   (shard.number,)).fetchone()
            except psycopg.Error as error:
                raise ProxyError(
                    f"shard {shard.number} ({shard.label}) does not answer through the proxy: "
                    f"{_first_line(error)}. PL/Proxy connects from the proxy's server as the "
                    f"calling role, with no password stored: give that server's account a "
                    f".pgpass entry for the shard, or trust (docs/guides/plproxy.md)") from None
            assert row is not None
            owned = canonical(nodes_of(row[2])) if row[2] not in (None, "all") else None
            if owned is not None and owned != shard.owned:
                raise ProxyError(f"shard {shard.number} reached through the proxy is "
                                 f"{row[0]} on port {row[1]}, which owns {owned}, not "
                                 f"{shard.owned}: check the URLs")
            progress(f"shard {shard.number} answers through the proxy ({row[0]} on port "
                     f"{row[1]})")
