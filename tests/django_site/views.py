"""Views that create an order, then answer 201, 503, or raise; ``RUNS`` counts them and
``GATE``, when cleared, holds them after their insert until set."""

from __future__ import annotations

import json
import threading

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse

from hivenet_db.django import idempotency_exempt, idempotent
from tests.django_site.models import Order

RUNS = {"count": 0}
GATE = threading.Event()
GATE.set()
ENTERED = threading.Event()
_lock = threading.Lock()


def _order(request: HttpRequest) -> Order:
    with _lock:
        RUNS["count"] += 1
    sku = json.loads(request.body or b"{}").get("sku", "tea")
    order = Order.objects.create(sku=sku)
    ENTERED.set()
    GATE.wait(30)
    return order


def create(request: HttpRequest) -> HttpResponse:
    order = _order(request)
    response = JsonResponse({"order": order.pk, "serial": order.serial}, status=201)
    response["Location"] = f"/orders/{order.pk}"
    response["X-Trace"] = "not replayed"
    return response


def unavailable(request: HttpRequest) -> HttpResponse:
    _order(request)
    return JsonResponse({"detail": "try later"}, status=503)


@transaction.non_atomic_requests
def unavailable_on_its_own(request: HttpRequest) -> HttpResponse:
    _order(request)
    return JsonResponse({"detail": "try later"}, status=503)


def crash(request: HttpRequest) -> HttpResponse:
    _order(request)
    raise RuntimeError("the view failed after its insert")


def refused(request: HttpRequest) -> HttpResponse:
    """Writes, then refuses the request (400): nothing of it is kept."""
    _order(request)
    return JsonResponse({"sku": ["not sold here"]}, status=400)


@idempotency_exempt
def exempt(request: HttpRequest) -> HttpResponse:
    order = _order(request)
    return JsonResponse({"order": order.pk}, status=201)


@idempotent(namespace="payments", required=False, fingerprint="json")
def payments(request: HttpRequest) -> HttpResponse:
    order = _order(request)
    return JsonResponse({"order": order.pk}, status=201)


@idempotent(commit_processing_first=True)
def provider(request: HttpRequest) -> HttpResponse:
    """As if it called a payment provider: `processing` is committed before it runs."""
    order = _order(request)
    return JsonResponse({"order": order.pk}, status=201)
