"""The bench site's settings: the same site for the three libraries, each configured as its
README recommends for production, on the same PostgreSQL (``HIVENET_BENCH_DATABASE_URL``):

- ``hivenet-db``: ``hivenet_db.django.IdempotencyMiddleware`` (its records in schema hivenet);
- ``drf-idempotency``: its middleware and its database backend (the README's quick start);
- ``django-idempotency-key``: its middleware with ``CacheKeyStorage`` on Django's database
  cache (the README's storage for more than one process; its default keeps keys in the
  process's memory), its default ``ThreadLock`` (one process here), and the cache's
  ``MAX_ENTRIES`` raised so that a day's keys are kept (Django's default, 300, would cull
  them and replays would run the view again).

``HIVENET_BENCH_LIBRARY`` names the library. Every request runs in one transaction
(``ATOMIC_REQUESTS``) on Django's connection pool of 8 (psycopg_pool), as the 8 threads of
gunicorn's one worker need.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit

LIBRARIES = ("hivenet-db", "drf-idempotency", "django-idempotency-key")
LIBRARY = os.environ.get("HIVENET_BENCH_LIBRARY", "hivenet-db")
if LIBRARY not in LIBRARIES:
    raise RuntimeError(f"HIVENET_BENCH_LIBRARY {LIBRARY!r} is none of {LIBRARIES}")

_url = urlsplit(os.environ.get("HIVENET_BENCH_DATABASE_URL", "postgresql:///bench"))
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "",
        "PORT": str(_url.port or ""),
        "ATOMIC_REQUESTS": True,
        "OPTIONS": {"pool": {"min_size": 8, "max_size": 8}},
    }
}
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "bench_cache",
        "TIMEOUT": 24 * 3600,
        "OPTIONS": {"MAX_ENTRIES": 10_000_000},
    }
}

INSTALLED_APPS = ["rest_framework", "hivenet_db.django", "drf_idempotency",
                  "hivenet_db.bench.django_peers"]
MIDDLEWARE = {
    "hivenet-db": ["hivenet_db.django.IdempotencyMiddleware"],
    "drf-idempotency": ["drf_idempotency.middleware.IdempotencyMiddleware"],
    "django-idempotency-key": ["idempotency_key.middleware.IdempotencyKeyMiddleware"],
}[LIBRARY]
HIVENET = {"IDEMPOTENCY": {"namespace": "bench"}}
IDEMPOTENCY = {"BACKEND": "drf_idempotency.backends.database.DatabaseBackend"}
IDEMPOTENCY_KEY = {"STORAGE": {"CLASS": "idempotency_key.storage.CacheKeyStorage",
                               "CACHE_NAME": "default"}}

ROOT_URLCONF = "hivenet_db.bench.django_peers.urls"
REST_FRAMEWORK: dict[str, Any] = {"UNAUTHENTICATED_USER": None,
                                  "DEFAULT_AUTHENTICATION_CLASSES": [],
                                  "DEFAULT_PERMISSION_CLASSES": []}
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
SECRET_KEY = "bench, not a secret"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
