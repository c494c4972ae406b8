import json

from django.http import HttpRequest, JsonResponse

from hivenet_db import SerialRepository, StepRepository
from hivenet_db.django import connection
from orders.models import Order, Payment


def place_order(request: HttpRequest) -> JsonResponse:
    """POST /orders (guarded by IdempotencyMiddleware): the order, then the money step, in the
    request's transaction; a retry with the same Idempotency-Key gets this response again."""
    body = json.loads(request.body)
    order = Order.objects.create(sku=body["sku"], amount=body["amount"])
    db = connection()  # Django's psycopg connection: the repositories join its transaction
    serial = SerialRepository(db).next_system("C0001", "A01", "01")
    with StepRepository(db).step(serial, {"order": order.serial,
                                          "amount": order.amount}) as step:
        if step.started:
            Payment.objects.create(serial=serial, order=order, amount=order.amount)
            step.response = {"paid": order.amount}
    return JsonResponse({"order": order.serial, "payment": serial, **step.response},
                        status=201)
