"""The ``hivenet-db`` command (placeholder until the command issue lands)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("hivenet-db: the command is not built yet", file=sys.stderr)
    return 2
