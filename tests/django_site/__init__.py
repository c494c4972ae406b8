"""A Django app for tests/test_django.py: orders whose serial the INSERT allocates, and views
that count their runs (and can hold them, to be caught in flight)."""
