"""Commands on serials: ``next`` issues them, ``parse`` shows their fields."""

from __future__ import annotations

import argparse
from typing import Any

from hivenet_db.allocation import SerialRepository, flush_at_commit
from hivenet_db.cli.database import transaction
from hivenet_db.cli.output import CommandError, Output, cell, dump_json
from hivenet_db.cli.parser import Commands
from hivenet_db.serial import parse_serial

# Options that name a serial field directly; any other field goes through --field NAME=VALUE.
FIELD_OPTIONS = ("system", "module", "instance", "target", "merchant", "shard")
NEXT_CHUNK = 10_000  # serials per round trip of `next -n N`
SCOPE_EXAMPLE = "--system C0001 --module A01 --instance 01"


def _fields(args: argparse.Namespace) -> dict[str, str]:
    fields = {name: getattr(args, name) for name in FIELD_OPTIONS
              if getattr(args, name) is not None}
    for item in args.field or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CommandError(f"--field {item!r}: expected NAME=VALUE")
        fields[name] = value
    return fields


def _serial_row(serial: Any) -> dict[str, Any]:
    # jsonb keeps keys sorted by length: show the standard's fields in layout order instead.
    order = {name: i for i, name in enumerate(FIELD_OPTIONS)}
    fields = dict(sorted(serial.fields.items(), key=lambda kv: (order.get(kv[0], 99), kv[0])))
    when = {"datetime": serial.datetime} if serial.datetime else {"date": serial.date}
    return {"serial": str(serial), "format": serial.format, **fields, **when, "seq": serial.seq}


def cmd_next(args: argparse.Namespace, out: Output) -> None:
    if args.count < 1:
        raise CommandError(f"--count {args.count}: must be at least 1")
    fields = _fields(args)
    serials: list[str] = []
    # In chunks inside the one transaction, so that the bar can advance; a chunk is large
    # enough that its round trip costs little next to its work.
    with transaction(args, out) as conn, \
            out.progress(f"issuing {args.format} serials", total=args.count) as step:
        flush_at_commit(conn)
        repository = SerialRepository(conn)
        while len(serials) < args.count:
            chunk = repository.next_many(args.format, min(NEXT_CHUNK, args.count - len(serials)),
                                         **fields)
            serials += chunk
            step(len(chunk))
    # Printed only after the commit above.
    if out.as_json:
        out.rows([_serial_row(s) for s in serials])
    else:
        print("\n".join(serials))


def cmd_parse(args: argparse.Namespace, out: Output) -> None:
    with transaction(args, out) as conn:
        serial = parse_serial(args.serial, args.format, db=conn)
    row = _serial_row(serial)
    if out.as_json:
        print(dump_json(row))
    else:
        out.table([{"field": k, "value": cell(v)} for k, v in row.items()])


def register(commands: Commands) -> None:
    p = commands.add(
        "next", cmd_next, "issue serials (committed before they are printed)",
        examples=[f"next unified {SCOPE_EXAMPLE}",
                  f"next interface {SCOPE_EXAMPLE} --target B0001 -n 100 --json"],
        description="Issue COUNT serials of FORMAT: unified, system, interface, id_service, "
        "merchant_trade, per_second or a custom format. Prints one serial per line "
        "(--json: the parsed fields too). With a terminal on stderr, a progress bar shows "
        "how many are issued.")
    p.add_argument("format", help="unified | system | interface | <format name>")
    for name in FIELD_OPTIONS:
        p.add_argument(f"--{name}", help=f"field {name}")
    p.add_argument("--field", action="append", metavar="NAME=VALUE",
                   help="any other field of a custom format (repeatable)")
    p.add_argument("--count", "-n", type=int, default=1, help="how many serials (default 1)")

    p = commands.add(
        "parse", cmd_parse, "show the format and fields of a serial",
        examples=["parse C0001A0101201507100123456789"],
        description="Parse SERIAL. Without --format the standard's kinds are told apart by "
        "length (28 unified, 30 system, 39 interface).")
    p.add_argument("serial")
    p.add_argument("--format", help="format name (needed for other formats)")
