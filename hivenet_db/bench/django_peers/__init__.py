"""The Django bench site (``django_peers``): one DRF view, made idempotent by hivenet-db, by
drf-idempotency or by django-idempotency-key (``settings``, chosen by the environment), served
by gunicorn and driven by ``hivenet_db.bench.django_peers.run``."""
