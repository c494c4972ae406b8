"""Commands on serials: ``next`` issues them, ``parse`` shows their fields; numeric time ids
(time_id) alike."""

from __future__ import annotations

import argparse
from typing import Any

from sqlalchemy import Connection, text

from hivenet_db.allocation import SerialRepository, flush_at_commit
from hivenet_db.cli.commands import FIELD_OPTIONS
from hivenet_db.cli.database import usable_engine
from hivenet_db.cli.formats import hinting_formats, is_numeric
from hivenet_db.cli.output import Output, cell, dump_json, json_line
from hivenet_db.parsing import builtin_formats
from hivenet_db.serial import Serial, parse_serial
from hivenet_db.time_ids import TimeId, parse_time_id

NEXT_CHUNK = 10_000  # serials per transaction of `next -n N`, committed then printed


def _fields(args: argparse.Namespace) -> dict[str, str]:
    fields = {name: getattr(args, name) for name in FIELD_OPTIONS
              if getattr(args, name) is not None}
    fields.update(args.field or [])
    return fields


def _serial_row(serial: Serial) -> dict[str, Any]:
    # jsonb keeps keys sorted by length: show the standard's fields in layout order instead.
    order = {name: i for i, name in enumerate(FIELD_OPTIONS)}
    fields = dict(sorted(serial.fields.items(), key=lambda kv: (order.get(kv[0], 99), kv[0])))
    when = {"datetime": serial.datetime} if serial.datetime else {"date": serial.date}
    return {"serial": str(serial), "format": serial.format, **fields, **when, "seq": serial.seq}


def _time_id_row(time_id: TimeId) -> dict[str, Any]:
    when = {"datetime": time_id.datetime} if time_id.datetime else {"date": time_id.date}
    return {"id": int(time_id), "format": time_id.format, **time_id.fields, **when,
            "seq": time_id.seq}


_PARSE_TIME_IDS = text("SELECT i, hivenet.parse_time_id(i, :format) FROM unnest(CAST(:ids AS "
                       "bigint[])) WITH ORDINALITY AS t(i, n) ORDER BY n")


def _parsed(conn: Connection, ids: list[int], format: str) -> list[TimeId]:
    """``ids`` with their parts: in Python for time_id, by the database (one statement) for
    a numeric format of its own."""
    if format in builtin_formats():
        return [parse_time_id(i, format) for i in ids]
    return [TimeId(i, parsed) for i, parsed in conn.execute(
        _PARSE_TIME_IDS, {"format": format, "ids": ids})]


def cmd_next(args: argparse.Namespace, out: Output) -> None:
    fields = _fields(args)
    issued = 0
    # A chunk per transaction, printed once committed: the output streams and memory stays
    # flat whatever the count; a chunk is large enough that its commit costs little.
    with usable_engine(args, out) as engine, hinting_formats(engine, [args.format]), \
            out.progress(f"issuing {args.format} serials", total=args.count) as step:
        with engine.begin() as conn:
            numeric = is_numeric(conn, args.format)
        while issued < args.count:
            n = min(NEXT_CHUNK, args.count - issued)
            with engine.begin() as conn:
                flush_at_commit(conn)
                repository = SerialRepository(conn)
                if numeric:
                    ids = repository.next_time_ids(n, args.format, **fields)
                    lines = ([json_line(_time_id_row(t)) for t in _parsed(conn, ids, args.format)]
                             if out.as_json else [str(i) for i in ids])
                else:
                    lines = [json_line(_serial_row(s)) if out.as_json else s
                             for s in repository.next_many(args.format, n, **fields)]
            print("\n".join(lines), flush=True)
            issued += len(lines)
            step(len(lines))


def _a_time_id(conn: Connection, value: str, format: str | None) -> bool:
    """Whether ``parse`` reads ``value`` as a numeric time id: digits that fit a bigint, of
    a numeric format, or of no format named and no length of the standard's kinds."""
    if not value.isascii() or not value.isdigit() or len(value) > 19:
        return False
    if format is not None:
        return is_numeric(conn, format)
    return len(value) not in {int(builtin_formats()[k]["length"])
                              for k in ("unified", "system", "interface")}


def cmd_parse(args: argparse.Namespace, out: Output) -> None:
    formats = [args.format] if args.format is not None else []
    with usable_engine(args, out) as engine, hinting_formats(engine, formats, args.serial), \
            engine.begin() as conn:
        if _a_time_id(conn, args.serial, args.format):
            row = _time_id_row(_parsed(conn, [int(args.serial)], args.format or "time_id")[0])
        else:
            row = _serial_row(parse_serial(args.serial, args.format, db=conn))
    if out.as_json:
        print(dump_json(row))
    else:
        out.table([{"field": k, "value": cell(v)} for k, v in row.items()])
