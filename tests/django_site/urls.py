from django.urls import path

from tests.django_site import drf, views

urlpatterns = [
    path("orders", views.create),
    path("unavailable", views.unavailable),
    path("unavailable-on-its-own", views.unavailable_on_its_own),
    path("crash", views.crash),
    path("api/orders", drf.OrderAPI.as_view()),
]
