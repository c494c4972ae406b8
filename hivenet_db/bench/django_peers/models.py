from __future__ import annotations

from django.db import models


class Order(models.Model):
    """The row the view inserts: one per request that ran (``key`` tells which)."""

    key: models.CharField[str, str] = models.CharField(max_length=64)
    sku: models.CharField[str, str] = models.CharField(max_length=40)
    amount: models.IntegerField[int, int] = models.IntegerField()

    class Meta:
        app_label = "bench_shop"
