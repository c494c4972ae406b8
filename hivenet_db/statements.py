"""The statements of the Python layer, by name: ``hivenet_db/queries/api.sql`` (every call of
the SQL API) and ``queries/metrics.sql`` (the metrics' read-only queries).

A file of named statements, as procrastinate keeps its queries: each statement follows a
``-- name: NAME`` line, with psycopg's placeholders (``%(name)s``, ``%(name)b``) bound by name
from the parameters of the call (``hivenet_db._execute.rows``); a literal ``%`` is written
``%%``, in a statement's comments too. The SQL of the library is in ``.sql`` files, where it
is read and reviewed as SQL.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files


@cache
def named(file: str) -> dict[str, str]:
    """The statements of ``hivenet_db/queries/<file>`` by name, each as written (its comments
    kept, leading and trailing blank lines not)."""
    source = (files("hivenet_db") / "queries" / file).read_text(encoding="utf-8")
    parts = re.split(r"^-- name: (\w+)\s*$", source, flags=re.M)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


#: The calls of the SQL API, by name (queries/api.sql).
API = named("api.sql")

__all__ = ["API", "named"]
