from __future__ import annotations

from django.apps import AppConfig


class ShopConfig(AppConfig):
    name = "hivenet_db.bench.django_peers"
    label = "bench_shop"
    default_auto_field = "django.db.models.BigAutoField"
