"""The endpoint: a DRF ``POST`` that validates its body, inserts a row and answers 201."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from hivenet_db.bench.django_peers.models import Order


class OrderInput(serializers.Serializer[Any]):
    sku = serializers.CharField(max_length=40)
    amount = serializers.IntegerField(min_value=1)


class Orders(APIView):
    def post(self, request: Request) -> Response:
        given = OrderInput(data=request.data)
        given.is_valid(raise_exception=True)
        order = Order.objects.create(key=request.headers.get("Idempotency-Key", ""),
                                     **given.validated_data)
        return Response({"order": order.pk, "sku": order.sku, "amount": order.amount},
                        status=201)
