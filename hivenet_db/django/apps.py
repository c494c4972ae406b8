"""The Django app of hivenet-db (label ``hivenet``)."""

from __future__ import annotations

from django.apps import AppConfig


class HivenetConfig(AppConfig):
    name = "hivenet_db.django"
    label = "hivenet"
    verbose_name = "hivenet-db"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate, pre_migrate

        from hivenet_db.django import checks  # registers the checks
        from hivenet_db.django.migrating import prepare_scopes, schema_first

        del checks
        pre_migrate.connect(schema_first, sender=self, dispatch_uid="hivenet.schema_first")
        post_migrate.connect(prepare_scopes, sender=self,
                             dispatch_uid="hivenet.prepare_scopes")
