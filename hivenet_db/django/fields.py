"""Serials allocated in the INSERT: expressions for a field's ``db_default``.

    serial = models.CharField(max_length=40, unique=True,
                              db_default=NextUnifiedSerial("C0001", "A01", "01"))

The column's default in the database is the call (``hivenet.next_unified_serial(...)``): the
INSERT allocates the serial itself, in the caller's transaction, and Django reads it back with
``RETURNING``. The table's migration must depend on ``("hivenet", "0001_schema")``, which
creates the functions; the inserting role needs ``hivenet_app``.
"""

from __future__ import annotations

import json
from typing import Any

from django.db.models import CharField, Func, JSONField, Value
from django.db.models.functions import Cast


class _Serial(Func):
    output_field: Any = CharField()


class NextSerial(_Serial):
    """``hivenet.next_serial(format, fields)``: the next serial of ``format``, its fields by
    name (``NextSerial("unified", system="C0001", module="A01", instance="01")``)."""

    function = "hivenet.next_serial"

    def __init__(self, format: str, **fields: str) -> None:
        super().__init__(Value(format), Cast(Value(json.dumps(fields, sort_keys=True)),
                                             output_field=JSONField()))


class NextUnifiedSerial(_Serial):
    """``hivenet.next_unified_serial(system, module, instance)``."""

    function = "hivenet.next_unified_serial"

    def __init__(self, system: str, module: str, instance: str) -> None:
        super().__init__(Value(system), Value(module), Value(instance))


class NextSystemSerial(_Serial):
    """``hivenet.next_system_serial(system, module, instance)``."""

    function = "hivenet.next_system_serial"

    def __init__(self, system: str, module: str, instance: str) -> None:
        super().__init__(Value(system), Value(module), Value(instance))


class NextInterfaceSerial(_Serial):
    """``hivenet.next_interface_serial(system, module, instance, target)``."""

    function = "hivenet.next_interface_serial"

    def __init__(self, system: str, module: str, instance: str, target: str) -> None:
        super().__init__(Value(system), Value(module), Value(instance), Value(target))


__all__ = ["NextInterfaceSerial", "NextSerial", "NextSystemSerial", "NextUnifiedSerial"]
