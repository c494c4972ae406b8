"""A Django REST framework view under the middleware: what DRF renders is what is recorded."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import APIView

from tests.django_site.views import _order


class OrderAPI(APIView):
    authentication_classes = ()
    permission_classes = ()

    def post(self, request: Any) -> Response:
        order = _order(request._request)
        return Response({"order": order.pk, "serial": order.serial}, status=201,
                        headers={"Location": f"/api/orders/{order.pk}"})
