"""Commands an operator schedules or runs at failover: ``maintain``, ``failover-fence``."""

from __future__ import annotations

import argparse

from sqlalchemy import Connection, text

from hivenet_db.cli.database import dicts, transaction
from hivenet_db.cli.output import Output
from hivenet_db.cli.sharding import each_shard, shard_urls
from hivenet_db.tools.business_time import business_now


def cmd_maintain(args: argparse.Namespace, out: Output) -> None:
    urls = shard_urls(args)
    if urls is not None:  # each shard in its own transaction, one row per shard
        done = each_shard(args, out, urls, maintained)
        out.rows([{"shard": name, "maintain": "done", "at": at} for name, at in done.items()])
        return
    with transaction(args, out) as conn, out.progress("hivenet.maintain()"):
        at = maintained(conn)
    out.rows([{"maintain": "done", "at": at}])


def maintained(conn: Connection) -> str:
    """Run hivenet.maintain() on ``conn``; when it finished, in the business time zone."""
    conn.execute(text("SELECT hivenet.maintain()"))
    return business_now(conn)


def cmd_failover_fence(args: argparse.Namespace, out: Output) -> None:
    with transaction(args, out) as conn:
        moved = dicts(conn, "SELECT * FROM hivenet.fence_failover(:gap, :force)",
                       {"gap": args.gap, "force": args.force})
        done = dicts(conn, "SELECT timeline, gap, counters, applied_by, fenced_at "
                            "FROM hivenet.failover_fence WHERE timeline = hivenet._timeline()")
    row = {"fenced": "now" if moved else "already", **(done[0] if done else {}),
           "parked": ", ".join(r["counter"] for r in moved if r["parked"]) or "none"}
    out.rows([row])
