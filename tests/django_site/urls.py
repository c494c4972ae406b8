from django.urls import path
from rest_framework.routers import SimpleRouter

from tests.django_site import drf, views

router = SimpleRouter()
router.register("api/viewset", drf.OrderViewSet, basename="viewset")

urlpatterns = [
    path("orders", views.create),
    path("unavailable", views.unavailable),
    path("unavailable-on-its-own", views.unavailable_on_its_own),
    path("crash", views.crash),
    path("api/orders", drf.OrderAPI.as_view()),
    path("refused", views.refused),
    path("exempt", views.exempt),
    path("payments", views.payments),
    path("provider", views.provider),
    path("api/validated", drf.ValidatedOrderAPI.as_view()),
    *router.urls,
]
