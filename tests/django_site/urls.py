from django.urls import path

from tests.django_site import views

urlpatterns = [
    path("orders", views.create),
    path("unavailable", views.unavailable),
    path("crash", views.crash),
]
