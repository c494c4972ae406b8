"""What a command adds to HN001 about formats: the known ones when a format is not one of
them, and the formats a serial does parse as when it is no serial of the one tried."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, text

from hivenet_db.errors import InvalidInput
from hivenet_db.parsing import builtin_formats
from hivenet_db.serial import parse_serial


def known_formats(conn: Connection) -> dict[str, int]:
    """Name → length of each format of this database, built-in ones first; the built-in
    ones only, when this role may not read hivenet.format (an application role)."""
    if conn.execute(text("SELECT has_table_privilege('hivenet.format', 'SELECT')")).scalar():
        return {name: length for name, length in conn.execute(text(
            "SELECT name, length FROM hivenet.format ORDER BY NOT builtin, name"))}
    return {name: int(definition["length"]) for name, definition in builtin_formats().items()}


def is_numeric(conn: Connection, format: str) -> bool:
    """Whether ``format`` issues numeric time ids (a bigint): the built-in time_id, or a
    format of this database with seq_bits (when this role may read hivenet.format)."""
    builtin = builtin_formats().get(format)
    if builtin is not None:
        return "time_shift" in builtin
    if not conn.execute(text("SELECT has_table_privilege('hivenet.format', 'SELECT')")).scalar():
        return False
    return bool(conn.execute(text(
        "SELECT time_shift IS NOT NULL FROM hivenet.format WHERE name = :f"), {"f": format}
    ).scalar())


def formats_parsing(conn: Connection, serial: str, known: dict[str, int]) -> list[str]:
    """The known formats of the serial's length that parse it, each tried in a savepoint."""
    fits = []
    for name in (n for n, length in known.items() if length == len(serial)):
        try:
            with conn.begin_nested():
                parse_serial(serial, name, db=conn)
            fits.append(name)
        except InvalidInput:
            pass
    return fits


def _hint(engine: Engine, formats: Sequence[str], serial: str | None) -> str | None:
    with engine.begin() as conn:
        known = known_formats(conn)
        if any(name not in known for name in formats):
            return f"known formats: {', '.join(known)}"
        fits = formats_parsing(conn, serial, known) if serial is not None else []
    if not fits:
        return None
    return f"it parses as {' and '.join(fits)}: try --format {fits[0]}"


@contextmanager
def hinting_formats(engine: Engine, formats: Sequence[str], serial: str | None = None
                    ) -> Iterator[None]:
    """HN001 raised in the block, with what to use instead when one of ``formats`` is not
    known or (``serial`` given) the serial parses as another format."""
    try:
        yield
    except InvalidInput as error:
        hint = _hint(engine, formats, serial)
        if hint is None:
            raise
        raise InvalidInput(f"{error.message}; {hint}") from error
