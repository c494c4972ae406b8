"""Django REST framework views under the middleware: what DRF renders is what is recorded; a
serializer's 400 binds no key; a viewset's actions covered or left out by the decorators."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from hivenet_db.django import idempotency_exempt, idempotent
from tests.django_site.views import _order


class OrderAPI(APIView):
    authentication_classes = ()
    permission_classes = ()

    def post(self, request: Any) -> Response:
        order = _order(request._request)
        return Response({"order": order.pk, "serial": order.serial}, status=201,
                        headers={"Location": f"/api/orders/{order.pk}"})


class OrderInput(serializers.Serializer[Any]):
    sku = serializers.CharField(max_length=40)


class ValidatedOrderAPI(APIView):
    """A serializer checks the body first: 400 before any write when ``sku`` is missing."""

    authentication_classes = ()
    permission_classes = ()

    def post(self, request: Any) -> Response:
        OrderInput(data=request.data).is_valid(raise_exception=True)
        order = _order(request._request)
        return Response({"order": order.pk, "serial": order.serial}, status=201)


class OrderViewSet(viewsets.ViewSet):
    authentication_classes = ()
    permission_classes = ()

    @idempotent(namespace="viewset")
    def create(self, request: Any) -> Response:
        order = _order(request._request)
        return Response({"order": order.pk}, status=201)

    @idempotency_exempt
    @action(detail=False, methods=["post"])  # type: ignore[untyped-decorator]
    def note(self, request: Any) -> Response:
        order = _order(request._request)
        return Response({"order": order.pk}, status=201)
