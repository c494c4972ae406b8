"""``manage.py hivenet_metrics``: the metrics of ``hivenet-db metrics`` (Prometheus text, or
JSON), read on Django's database; a failure is its one line."""

from __future__ import annotations

import json
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand
from django.db import DEFAULT_DB_ALIAS, transaction

from hivenet_db import metrics
from hivenet_db.django.db import connection
from hivenet_db.django.management.failures import one_line


class Command(BaseCommand):
    help = ("Print hivenet's metrics (what `hivenet-db metrics` prints) in the Prometheus "
            "text format, or as JSON.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS,
                            help="the Django database to read (default: %(default)s)")
        parser.add_argument("--json", action="store_true", help="JSON instead of Prometheus text")

    def handle(self, *args: Any, **options: Any) -> None:
        with one_line("metrics", options["database"]), \
                transaction.atomic(using=options["database"]):
            read = metrics.read(connection(options["database"]))
        if options["json"]:
            self.stdout.write(json.dumps([metric.as_dict() for metric in read]))
        else:
            self.stdout.write(metrics.exposition(read), ending="")
