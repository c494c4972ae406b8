"""An ``on_decision`` hook named by its dotted path in ``HIVENET["IDEMPOTENCY"]``: keeps what
it was told in ``TOLD``."""

from __future__ import annotations

TOLD: list[tuple[str, str, str, int | None]] = []


def record(namespace: str, key: str, decision: str, attempt: int | None) -> None:
    TOLD.append((namespace, key, decision, attempt))
