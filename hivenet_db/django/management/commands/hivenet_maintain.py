"""``manage.py hivenet_maintain``: ``hivenet.maintain()``, as ``hivenet-db maintain`` runs it
(partitions, purges, scope promotion), on Django's database, in one transaction; a failure is
its one line."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand
from django.db import DEFAULT_DB_ALIAS, transaction

from hivenet_db._execute import rows
from hivenet_db.django.db import connection
from hivenet_db.django.management.failures import one_line
from hivenet_db.statements import API
from hivenet_db.tools.business_time import business_now


class Command(BaseCommand):
    help = ("Run hivenet.maintain() (what `hivenet-db maintain` runs): create upcoming "
            "partitions, drop expired ones, purge per retention. Schedule it every few "
            "minutes, as a login granted hivenet_admin.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS,
                            help="the Django database to maintain (default: %(default)s)")

    def handle(self, *args: Any, **options: Any) -> None:
        with one_line("maintain", options["database"]), \
                transaction.atomic(using=options["database"]):
            rows(connection(options["database"]), API["maintain"], {})
            at = business_now(connection(options["database"]))
        self.stdout.write(f"maintain: done at {at}")
