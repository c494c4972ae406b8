"""Command ``proxy install``: a PL/Proxy database in front of the shards (docs/plproxy.md)."""

from __future__ import annotations

import argparse

from hivenet_db import proxy
from hivenet_db.cli.database import embedded_url, parse_target
from hivenet_db.cli.output import CommandError, Output
from hivenet_db.cli.parser import Commands
from hivenet_db.dburl import from_env, libpq_url

LOCAL_DATABASE = "hivenet_proxy"  # on the embedded server, when no URL is given


def cmd_proxy(args: argparse.Namespace, out: Output) -> None:
    shards = [url.strip() for url in args.shards.split(",") if url.strip()]
    given = from_env(args.url)
    url = libpq_url(given) if given else embedded_url(out, LOCAL_DATABASE, to_head=False)
    args.target = parse_target(url)  # for messages: never the password
    try:
        installed = proxy.install(url, shards, owns=args.owns, progress=out.note)
    except proxy.ProxyError as error:
        raise CommandError(str(error)) from None
    out.rows([{"shard": s.number, "database": s.label, "owns": s.owned, "from": s.source,
               "single primary": s.single_primary} for s in installed])


def register(commands: Commands) -> None:
    p = commands.add(
        "proxy", cmd_proxy, "install a PL/Proxy database that routes the hivenet functions to "
        "the shards owning each instance (calls through it commit on their own)",
        examples=["proxy install --shards postgresql://admin@shard0/app,"
                  "postgresql://admin@shard1/app --url postgresql://postgres@proxyhost/proxy"],
        description="Install (again: safe) PL/Proxy in the database of --url and, in its schema "
        "hivenet, one function per function of the application API, same names and "
        "signatures, each running on the shard that owns the instance of its serial or scope "
        "(claims and keyed requests: by the key's hash). What each shard owns is read from "
        "the shard (hivenet-db migrate --owns-instances); --owns for shards without it. Each "
        "call commits on its own on the shard, whatever the caller's transaction does: for "
        "callers without a transaction of their own (docs/plproxy.md). Needs PL/Proxy on "
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
