#!/usr/bin/env python
"""The example shop's Django command: ``SHOP_DATABASE_URL=postgresql://... python manage.py
migrate`` (as the schema's owner), then ``runserver`` (as the application's login)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
