"""Commands an operator schedules or runs at failover: ``maintain``, ``failover-fence``."""

from __future__ import annotations

import argparse
import datetime as dt

from sqlalchemy import text

from hivenet_db.cli.database import dicts, transaction
from hivenet_db.cli.output import Output
from hivenet_db.cli.parser import Commands
from hivenet_db.cli.sharding import add_shard_options, each_shard, shard_urls


def cmd_maintain(args: argparse.Namespace, out: Output) -> None:
    urls = shard_urls(args)
    if urls is not None:  # each shard in its own transaction, one row per shard
        done = each_shard(args, out, urls, lambda conn: (
            conn.execute(text("SELECT hivenet.maintain()")),
            dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))[1])
        out.rows([{"shard": name, "maintain": "done", "at": at} for name, at in done.items()])
        return
    with transaction(args, out) as conn, out.progress("hivenet.maintain()"):
        conn.execute(text("SELECT hivenet.maintain()"))
    out.rows([{"maintain": "done", "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}])


def cmd_failover_fence(args: argparse.Namespace, out: Output) -> None:
    with transaction(args, out) as conn:
        moved = dicts(conn, "SELECT * FROM hivenet.fence_failover(:gap, :force)",
                       {"gap": args.gap, "force": args.force})
        done = dicts(conn, "SELECT timeline, gap, counters, applied_by, fenced_at "
                            "FROM hivenet.failover_fence WHERE timeline = hivenet._timeline()")
    row = {"fenced": "now" if moved else "already", **(done[0] if done else {}),
           "parked": ", ".join(r["counter"] for r in moved if r["parked"]) or "none"}
    out.rows([row])


def register(commands: Commands) -> None:
    p = commands.add("maintain", cmd_maintain, "run hivenet.maintain() (partitions, "
                     "retention); run it every few minutes",
                     examples=["maintain --url postgresql://owner@db/app",
                               "maintain --shard-map shards.json"],
                     description="Run hivenet.maintain() (partitions, retention); run it "
                     "every few minutes. With --shards or --shard-map: on every shard, each "
                     "in its own transaction.")
    add_shard_options(p)

    p = commands.add(
        "failover-fence", cmd_failover_fence, "on a promoted standby, before it takes "
        "traffic: move every counter past what the old primary may have issued",
        examples=["failover-fence --gap 1000000 --url postgresql://admin@new-primary/app"],
        description="Run hivenet.fence_failover(): move every counter (scope sequences, "
        "cold counters) forward by --gap, so that a standby promoted after an asynchronous "
        "failover never issues a serial its old primary issued in the WAL it never got. "
        "Choose the gap >= peak serials per second of one format x maximum replication "
        "lag in seconds (docs/operations.md, Failover). Does nothing when this timeline was "
        "fenced already (--force fences again). Counters whose period cannot hold the gap "
        "are parked (HN010 until their next period) and listed.")
    p.add_argument("--gap", type=int, default=None,
                   help="how far to move each counter (default 100000)")
    p.add_argument("--force", action="store_true",
                   help="fence again although this timeline was fenced already")
