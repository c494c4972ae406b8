"""Commands that read: ``report`` (reporting views) and ``metrics`` (Prometheus)."""

from __future__ import annotations

import argparse
from typing import Any

from sqlalchemy import Connection, text

from hivenet_db.cli.database import dicts, exists, transaction
from hivenet_db.cli.output import Output, dump_json
from hivenet_db.cli.sharding import each_shard, merged_sections, shard_urls
from hivenet_db.tools.business_time import in_business_time


def report_sections(conn: Connection, unified: str | None, limit: int
                    ) -> dict[str, list[dict[str, Any]] | str]:
    """Each section of ``report`` whose view or function exists in this database."""
    sections: dict[str, list[dict[str, Any]] | str] = {}
    # Every time below is in this zone (the transaction's TimeZone: in_business_time).
    if in_business_time(conn) is not None:
        sections["business time zone"] = dicts(
            conn, "SELECT time_zone, utc_offset::text AS utc_offset, local_time::text "
                  "AS local_time FROM hivenet.business_time_zone")
    else:
        sections["business time zone"] = "(this role may not read hivenet.business_time_zone)"
    if unified is not None:
        if exists(conn, "function", "hivenet.call_chain"):
            sections[f"call chain of {unified}"] = dicts(
                conn, "SELECT * FROM hivenet.call_chain(:u)", {"u": unified})
        else:
            sections[f"call chain of {unified}"] = "(hivenet.call_chain is not installed)"
    views = (  # title, view, columns, order
        # The scopes in use first, the least headroom first; idle scopes after them.
        ("usage and headroom of the current period", "hivenet.scope_usage",
         "format, scope, period_start, issued, capacity, remaining, used_percent",
         "ORDER BY issued > 0 DESC, remaining::float8 / capacity, format, scope"),
        ("interface calls per day", "hivenet.interface_calls_per_day", "*", ""),
        ("steps per state", "hivenet.step_states", "*", ""),
        ("stuck steps", "hivenet.stuck_steps", "*", ""),
        ("keyed requests per state", "hivenet.request_states", "*", ""),
        ("stuck keyed requests", "hivenet.stuck_requests", "*", ""),
    )
    for title, view, columns, order in views:
        if exists(conn, "relation", view):
            sections[title] = dicts(conn, f"SELECT {columns} FROM {view} {order} LIMIT :n",
                                     {"n": limit})
            left_out = conn.execute(text(f"SELECT count(*) FROM {view}")).scalar_one() - limit
            if left_out > 0:
                sections[f"{title}: left out"] = f"{left_out} more rows past --limit {limit}"
    if exists(conn, "function", "hivenet.replication_warning") and conn.execute(text(
            "SELECT has_function_privilege('hivenet.replication_warning()', 'EXECUTE')")
            ).scalar():
        warning = conn.execute(text("SELECT hivenet.replication_warning()")).scalar()
        sections["replication"] = f"WARNING: {warning}" if warning else \
            "(no standby without synchronous replication)"
    return sections


def cmd_report(args: argparse.Namespace, out: Output) -> None:
    urls = shard_urls(args)
    if urls is not None:
        sections = merged_sections(each_shard(
            args, out, urls, lambda conn: report_sections(conn, args.unified, args.limit)))
        chain = sections.get(f"call chain of {args.unified}")
        if isinstance(chain, list):  # the calls of one transaction, in the order recorded
            chain.sort(key=lambda row: row["recorded_at"])
    else:
        with transaction(args, out) as conn:
            sections = report_sections(conn, args.unified, args.limit)
    out.sections(sections)

def cmd_metrics(args: argparse.Namespace, out: Output) -> None:
    from hivenet_db import metrics

    with transaction(args, out) as conn:
        read = metrics.read(conn)
    if out.as_json:
        print(dump_json([m.as_dict() for m in read]))
    else:
        print(metrics.exposition(read), end="")
