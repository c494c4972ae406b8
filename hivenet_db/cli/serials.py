"""Commands on serials: ``next`` issues them, ``parse`` shows their fields."""

from __future__ import annotations

import argparse
from typing import Any

from hivenet_db.allocation import SerialRepository, flush_at_commit
from hivenet_db.cli.commands import FIELD_OPTIONS
from hivenet_db.cli.database import usable_engine
from hivenet_db.cli.formats import hinting_formats
from hivenet_db.cli.output import Output, cell, dump_json, json_line
from hivenet_db.serial import Serial, parse_serial

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


def cmd_next(args: argparse.Namespace, out: Output) -> None:
    fields = _fields(args)
    issued = 0
    # A chunk per transaction, printed once committed: the output streams and memory stays
    # flat whatever the count; a chunk is large enough that its commit costs little.
    with usable_engine(args, out) as engine, hinting_formats(engine, [args.format]), \
            out.progress(f"issuing {args.format} serials", total=args.count) as step:
        while issued < args.count:
            with engine.begin() as conn:
                flush_at_commit(conn)
                chunk = SerialRepository(conn).next_many(
                    args.format, min(NEXT_CHUNK, args.count - issued), **fields)
            print("\n".join(json_line(_serial_row(s)) if out.as_json else s for s in chunk),
                  flush=True)
            issued += len(chunk)
            step(len(chunk))


def cmd_parse(args: argparse.Namespace, out: Output) -> None:
    formats = [args.format] if args.format is not None else []
    with usable_engine(args, out) as engine, hinting_formats(engine, formats, args.serial), \
            engine.begin() as conn:
        serial = parse_serial(args.serial, args.format, db=conn)
    row = _serial_row(serial)
    if out.as_json:
        print(dump_json(row))
    else:
        out.table([{"field": k, "value": cell(v)} for k, v in row.items()])
