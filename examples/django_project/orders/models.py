from __future__ import annotations

from django.db import models

from hivenet_db.django import NextUnifiedSerial


class Order(models.Model):
    # allocated by the INSERT itself: hivenet.next_unified_serial(...) is the column's default
    serial: models.CharField[str, str] = models.CharField(
        max_length=40, unique=True, db_default=NextUnifiedSerial("C0001", "A01", "01"))
    sku: models.CharField[str, str] = models.CharField(max_length=40)
    amount: models.IntegerField[int, int] = models.IntegerField()


class Payment(models.Model):
    # the system serial of the money step: a retry of the step finds its record
    serial: models.CharField[str, str] = models.CharField(max_length=40, unique=True)
    order: models.ForeignKey[Order, Order] = models.ForeignKey(Order, on_delete=models.PROTECT)
    amount: models.IntegerField[int, int] = models.IntegerField()
