"""``--shards URL,URL`` and ``--shard-map FILE`` for the commands that run over every shard
(``report``, ``maintain``): each shard in a transaction of its own, rows merged with a first
column ``shard`` (docs/guides/scale-out.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection

from hivenet_db.cli.database import USABLE, parse_target, require
from hivenet_db.cli.output import CommandError, Output, UsageError
from hivenet_db.shards import merged, named_urls, shard_urls_in
from hivenet_db.tools.business_time import in_business_time
from hivenet_db.tools.dburl import engine_for
from hivenet_db.urls import libpq_url

T = TypeVar("T")


def shard_urls(args: argparse.Namespace) -> dict[str, str] | None:
    """Shard name → URL from --shards or --shard-map; None when neither is given."""
    if getattr(args, "shards", None):
        if getattr(args, "url", None):
            raise UsageError("--shards names the databases: drop --url")
        urls = [u.strip() for u in args.shards.split(",") if u.strip()]
        return {name: libpq_url(url) for name, url in named_urls(urls).items()}
    if getattr(args, "shard_map", None):
        if getattr(args, "url", None):
            raise UsageError("--shard-map names the databases: drop --url")
        try:
            urls_of = shard_urls_in(args.shard_map)
        except (OSError, ValueError) as error:
            raise CommandError(f"cannot read shard map {args.shard_map}: {error}") from None
        if not urls_of:
            raise CommandError(f"shard map {args.shard_map} names no shard (\"shards\": "
                               f"{{name: url}})")
        return {name: libpq_url(url) for name, url in urls_of.items()}
    return None


def each_shard(args: argparse.Namespace, out: Output, urls: dict[str, str],
               work: Callable[[Connection], T]) -> dict[str, T]:
    """``work(conn)`` on every shard in name order, each in a committed transaction of its
    own; the first failure stops (its message names the shard's database)."""
    results: dict[str, T] = {}
    for name in sorted(urls):
        args.target = parse_target(urls[name])
        with out.progress(f"shard {name}"), engine_for(urls[name]) as engine, \
                engine.begin() as conn:
            require(conn, USABLE)
            in_business_time(conn)
            results[name] = work(conn)
    return results


def merged_sections(per_shard: dict[str, dict[str, list[dict[str, Any]] | str]]
                    ) -> dict[str, list[dict[str, Any]] | str]:
    """The sections of several shards: tables concatenated with a first column ``shard``,
    texts kept once when every shard says the same, else one line per shard."""
    titles: list[str] = []
    for sections in per_shard.values():
        titles += [t for t in sections if t not in titles]
    out: dict[str, list[dict[str, Any]] | str] = {}
    for title in titles:
        bodies = {name: s[title] for name, s in per_shard.items() if title in s}
        tables = {name: b for name, b in bodies.items() if isinstance(b, list)}
        if len(tables) == len(bodies):
            out[title] = merged(tables)
        else:
            texts = {name: b if isinstance(b, str) else f"{len(b)} rows"
                     for name, b in bodies.items()}
            out[title] = next(iter(texts.values())) if len(set(texts.values())) == 1 else \
                "\n".join(f"{name}: {text}" for name, text in texts.items())
    return out
