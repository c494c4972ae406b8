from __future__ import annotations

from django.db import models

from hivenet_db.django import NextUnifiedSerial


class Order(models.Model):
    serial: models.CharField[str, str] = models.CharField(max_length=40, unique=True,
                              db_default=NextUnifiedSerial("C0001", "A01", "01"))
    sku: models.CharField[str, str] = models.CharField(max_length=40)

    class Meta:
        app_label = "django_site"
