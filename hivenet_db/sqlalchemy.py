"""SQLAlchemy constructs for the allocation functions: serials in ORM models and Core statements.

Each function returns a SQL function call (``hivenet.next_unified_serial('C0001', 'A01',
'01')``) typed as text, or as a ``BigInteger`` for the numeric time ids (``next_time_id``).
Use it as a column's ``server_default`` (the database allocates when an INSERT leaves the
column out), in ``insert().values()``, or in a ``select()``; ``next_serials`` and
``next_time_ids`` are set-returning, for ``INSERT ... SELECT`` of a batch. Arguments are
rendered as literals in DDL and as bound parameters in statements. See docs/guides/orm.md.

The serial is allocated by the INSERT, so inside the caller's transaction: a rolled-back
INSERT leaves a gap, as with ``SerialRepository.next``.
"""

from __future__ import annotations

import json

from sqlalchemy import BigInteger, Integer, Text, cast, func, literal
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql.functions import Function


def _fields(fields: dict[str, str]) -> object:
    # sort_keys: the same fields give the same DDL text (alembic autogenerate compares it)
    return cast(literal(json.dumps(fields, sort_keys=True), Text), JSONB)


def next_serial(format: str, **fields: str) -> Function[str]:
    """``hivenet.next_serial(format, fields)``: one serial of any format."""
    return func.hivenet.next_serial(literal(format, Text), _fields(fields), type_=Text)


def next_serials(format: str, count: int, **fields: str) -> Function[str]:
    """``hivenet.next_serials(format, fields, count)``: ``count`` serials, one row each, in
    increasing order (set-returning: put it in a SELECT list or FROM)."""
    return func.hivenet.next_serials(literal(format, Text), _fields(fields),
                                     literal(count, Integer), type_=Text)


def next_time_id(format: str = "time_id", **fields: str) -> Function[int]:
    """``hivenet.next_time_id(format)``: one numeric time id (a ``BigInteger`` column's
    default); ``fields`` for a numeric format of your own with fields."""
    if not fields:  # time_id's own call, as the docs print it
        return func.hivenet.next_time_id(literal(format, Text), type_=BigInteger)
    return func.hivenet.next_time_id(literal(format, Text), _fields(fields), type_=BigInteger)


def next_time_ids(count: int, format: str = "time_id", **fields: str) -> Function[int]:
    """``hivenet.next_time_ids(format, count)``: ``count`` time ids, one row each, in
    increasing order (set-returning: put it in FROM, or a SELECT list)."""
    args = [literal(format, Text), literal(count, Integer)]
    if fields:
        args.append(_fields(fields))
    return func.hivenet.next_time_ids(*args, type_=BigInteger)


def next_unified_serial(system: str, module: str, instance: str) -> Function[str]:
    return func.hivenet.next_unified_serial(literal(system, Text), literal(module, Text),
                                            literal(instance, Text), type_=Text)


def next_system_serial(system: str, module: str, instance: str) -> Function[str]:
    return func.hivenet.next_system_serial(literal(system, Text), literal(module, Text),
                                           literal(instance, Text), type_=Text)


def next_interface_serial(system: str, module: str, instance: str,
                          target: str) -> Function[str]:
    return func.hivenet.next_interface_serial(literal(system, Text), literal(module, Text),
                                              literal(instance, Text), literal(target, Text),
                                              type_=Text)


__all__ = ["next_interface_serial", "next_serial", "next_serials", "next_system_serial",
           "next_time_id", "next_time_ids", "next_unified_serial"]
