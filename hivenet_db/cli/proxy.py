"""Command ``proxy install``: a PL/Proxy database in front of the shards
(docs/guides/plproxy.md)."""

from __future__ import annotations

import argparse

from hivenet_db.cli.database import embedded_url, parse_target
from hivenet_db.cli.output import CommandError, Output
from hivenet_db.tools import plproxy
from hivenet_db.tools.dburl import from_env
from hivenet_db.urls import libpq_url

LOCAL_DATABASE = "hivenet_proxy"  # on the embedded server, when no URL is given


def cmd_proxy(args: argparse.Namespace, out: Output) -> None:
    shards = [url.strip() for url in args.shards.split(",") if url.strip()]
    given = from_env(args.url)
    url = libpq_url(given) if given else embedded_url(out, LOCAL_DATABASE, to_head=False)
    args.target = parse_target(url)  # for messages: never the password
    try:
        installed = plproxy.install(url, shards, owns=args.owns, progress=out.note)
    except plproxy.ProxyError as error:
        raise CommandError(str(error)) from None
    out.rows([{"shard": s.number, "database": s.label, "owns": s.owned, "from": s.source,
               "single primary": s.single_primary} for s in installed])
