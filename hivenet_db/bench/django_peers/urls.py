from __future__ import annotations

from django.urls import path

from hivenet_db.bench.django_peers.views import Orders

urlpatterns = [path("orders", Orders.as_view())]
