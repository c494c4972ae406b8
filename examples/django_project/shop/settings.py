"""A minimal shop on hivenet-db: one order view guarded by the idempotency middleware, the
money moved in a step, everything in one transaction per request (ATOMIC_REQUESTS)."""

import os
from urllib.parse import unquote, urlsplit

_url = urlsplit(os.environ["SHOP_DATABASE_URL"])  # postgresql://user:password@host:port/db

SECRET_KEY = "example only"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
ROOT_URLCONF = "shop.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["hivenet_db.django", "orders"]
MIDDLEWARE = ["hivenet_db.django.IdempotencyMiddleware"]
HIVENET = {
    "IDEMPOTENCY": {"namespace": "shop"},
    # The channel the shop allocates for (unified and system serials): prepared by migrate,
    # so that it counts from 1 (an unprepared scope is refused).
    "PREPARE": ["C0001 A01 01"],
}

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        "ATOMIC_REQUESTS": True,  # the order, the payment and the recorded response: one commit
    }
}
