"""The commands' failures as ``hivenet-db`` reports them: one line and its exit status
(hivenet_db.cli.failures), not a traceback (``--traceback`` still shows it)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.core.management.base import CommandError
from django.db import connections

from hivenet_db.cli.database import LOCAL_SOCKET, Target
from hivenet_db.cli.failures import explain


@contextmanager
def one_line(command: str, database: str) -> Iterator[None]:
    """Run the block of ``manage.py hivenet_<command>`` on Django database ``database``; a
    failure becomes a ``CommandError`` with ``hivenet-db <command>``'s line and status."""
    try:
        yield
    except Exception as error:
        cause = error.__cause__
        # Django wraps the driver's errors in its own (django.db.Error), the driver's the cause
        reported = cause if isinstance(cause, psycopg.Error) else error
        settings = connections[database].settings_dict
        target = Target(settings.get("HOST") or LOCAL_SOCKET, str(settings.get("PORT") or ""),
                        settings.get("NAME") or "", settings.get("USER") or "")
        failure = explain(reported, argparse.Namespace(command=command, target=target))
        raise CommandError(failure.message, returncode=failure.status) from error


__all__ = ["one_line"]
