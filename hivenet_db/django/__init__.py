"""Django integration (extra ``[django]``): ``INSTALLED_APPS += ["hivenet_db.django"]``.

The app (label ``hivenet``) installs schema hivenet with ``manage.py migrate``, adds the
system checks ``hivenet.W001``-``W003`` and the commands ``hivenet_maintain`` and
``hivenet_metrics``. The repositories run on Django's connection (``connection()``), inside
``transaction.atomic()``; ``NextUnifiedSerial`` and its siblings allocate a serial in the
INSERT as a field's ``db_default``; ``IdempotencyMiddleware`` guards ``POST`` and ``PATCH``
with ``Idempotency-Key``, and ``idempotent`` / ``idempotency_exempt`` cover or leave out a view.
See docs/guides/django.md.

The names are imported on first use (PEP 562): Django imports this package while it loads
the apps, before models may be imported.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hivenet_db.django.db import connection, database_url
    from hivenet_db.django.decorators import idempotency_exempt, idempotent
    from hivenet_db.django.fields import (
        NextInterfaceSerial,
        NextSerial,
        NextSystemSerial,
        NextUnifiedSerial,
    )
    from hivenet_db.django.middleware import IdempotencyMiddleware

_HOMES = {
    "connection": "hivenet_db.django.db",
    "database_url": "hivenet_db.django.db",
    "NextSerial": "hivenet_db.django.fields",
    "NextUnifiedSerial": "hivenet_db.django.fields",
    "NextSystemSerial": "hivenet_db.django.fields",
    "NextInterfaceSerial": "hivenet_db.django.fields",
    "IdempotencyMiddleware": "hivenet_db.django.middleware",
    "idempotent": "hivenet_db.django.decorators",
    "idempotency_exempt": "hivenet_db.django.decorators",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = ["IdempotencyMiddleware", "NextInterfaceSerial", "NextSerial", "NextSystemSerial",
           "NextUnifiedSerial", "connection", "database_url", "idempotency_exempt", "idempotent"]
