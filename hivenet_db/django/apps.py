"""The Django app of hivenet-db (label ``hivenet``)."""

from __future__ import annotations

from django.apps import AppConfig


class HivenetConfig(AppConfig):
    name = "hivenet_db.django"
    label = "hivenet"
    verbose_name = "hivenet-db"

    def ready(self) -> None:
        from hivenet_db.django import checks  # registers the checks

        del checks
