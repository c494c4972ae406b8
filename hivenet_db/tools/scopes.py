"""Scopes to prepare, as people write them, and preparing them (hivenet.prepare_scope): for
``hivenet-db prepare`` and ``migrate --prepare FILE``, Django's ``HIVENET["PREPARE"]`` and the
pytest plugin's ``hivenet_prepare``.

One line names scopes, optionally after the format they are for:

- ``C0001 A01 01-99``: a channel (system, module, instance, or a range of instances), for the
  standard's three kinds (unified, system, interface) unless a format is named first;
- ``system=C0001,module=A01,instance=01`` or a JSON object: the fields of one scope's counter
  (a value ``NN-NN`` is a range: one scope per value);
- ``unified C0001 A01 01``, ``id_service merchant=123456789012,shard=05``: the same, for that
  format only; a format alone names its one scope (``per_second``).

Several channels or scopes may follow each other on one line; a file holds one such line a
line (``#`` comments, blank lines). A format named by the caller (``--format``) stands for the
lines that name none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from sqlalchemy import Engine, text

from hivenet_db.errors import translated
from hivenet_db.tools.dburl import engine_for

#: The formats counted per channel (system, module, instance): a channel is prepared in each.
CHANNEL_FORMATS = ("unified", "system", "interface")
#: Scopes per transaction: each new sequence holds a lock until commit (a few thousand would
#: fill the lock table), and allocations from the format's shared fallback wait for that commit.
BATCH = 500

_RANGE = re.compile(r"^([0-9]+)-([0-9]+)$")


class ScopeError(ValueError):
    """A line that names no scope; the message quotes it and says what was expected."""


@dataclass(frozen=True)
class Scopes:
    """The scopes of one line: their counters' fields, and the format the line names (None:
    the caller's, else the channel formats)."""

    format: str | None
    fields: tuple[dict[str, str], ...]


def _values(value: str, line: str) -> list[str]:
    """A field's value, or each value of a range ``01-99`` (as wide as its ends)."""
    found = _RANGE.match(value)
    if found is None:
        return [value]
    low, high = found.groups()
    if len(low) != len(high) or int(low) > int(high):
        raise ScopeError(f"{line!r}: range {value!r} must run upwards between two values of "
                         f"one width, such as 01-99")
    return [f"{n:0{len(low)}d}" for n in range(int(low), int(high) + 1)]


def _expanded(fields: dict[str, str], line: str) -> list[dict[str, str]]:
    """One scope per combination of the values of its ranges."""
    scopes: list[dict[str, str]] = [{}]
    for name, value in fields.items():
        scopes = [{**scope, name: v} for scope in scopes for v in _values(value, line)]
    return scopes


def _pairs(word: str, line: str) -> dict[str, str]:
    pairs = [part.partition("=") for part in word.split(",")]
    if not all(name.strip() and sep for name, sep, _ in pairs):
        raise ScopeError(f"{line!r}: {word!r} is not NAME=VALUE,NAME=VALUE")
    return {name.strip(): value.strip() for name, _, value in pairs}


def parse(words: Sequence[str]) -> Scopes:
    """The scopes of a line split into words (a command's arguments)."""
    line = " ".join(words)
    bare = [w for w in words if "=" not in w and not w.startswith("{")]
    named = None
    if len(bare) % 3 == 1:  # a format, then channels of three words each
        if words[0] != bare[0]:
            raise ScopeError(f"{line!r}: the format goes first")
        named, words = words[0], words[1:]
    elif len(bare) % 3 == 2:
        raise ScopeError(f"{line!r}: a channel is three words, SYSTEM MODULE INSTANCES "
                         f"(such as C0001 A01 01-99), after an optional format")
    fields: list[dict[str, str]] = []
    channel: list[str] = []
    for word in words:
        if channel and ("=" in word or word.startswith("{")):
            raise ScopeError(f"{line!r}: a channel is three words in a row, SYSTEM MODULE "
                             f"INSTANCES")
        if word.startswith("{"):
            fields += _expanded(_json_object(word, line), line)
        elif "=" in word:
            fields += _expanded(_pairs(word, line), line)
        else:
            channel.append(word)
            if len(channel) == 3:
                system, module, instances = channel
                fields += _expanded({"system": system, "module": module,
                                     "instance": instances}, line)
                channel = []
    if not fields and named is None:
        raise ScopeError("no scope given")
    return Scopes(named, tuple(fields or [{}]))


def _json_object(item: str, line: str) -> dict[str, str]:
    try:
        fields = json.loads(item)
    except json.JSONDecodeError as error:
        raise ScopeError(f"{line!r}: not a JSON object ({error.msg})") from None
    if not isinstance(fields, dict):
        raise ScopeError(f"{line!r}: not a JSON object")
    return {str(k): str(v) for k, v in fields.items()}


def parse_line(line: str) -> Scopes:
    """The scopes of one line of text: a JSON object alone, else words."""
    line = line.strip()
    if line.startswith("{"):
        return Scopes(None, tuple(_expanded(_json_object(line, line), line)))
    return parse(line.split())


def read(lines: Iterable[str]) -> list[Scopes]:
    """The scopes of lines of text, but blank lines and ``#`` comments."""
    return [parse_line(line) for line in lines
            if line.strip() and not line.lstrip().startswith("#")]


def batches(scopes: Iterable[Scopes], formats: Sequence[str] = ()
            ) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """(format, up to BATCH scopes' fields), every scope in each of its formats: the line's
    own, else ``formats``, else the channel formats."""
    by_format: dict[str, list[dict[str, str]]] = {}
    for scope in scopes:
        for name in [scope.format] if scope.format else (formats or CHANNEL_FORMATS):
            by_format.setdefault(name, []).extend(scope.fields)
    for name, fields in by_format.items():
        for start in range(0, len(fields), BATCH):
            yield name, fields[start:start + BATCH]


def count(scopes: Iterable[Scopes], formats: Sequence[str] = ()) -> int:
    """How many scopes ``batches`` prepares (those prepared already included)."""
    return sum(len(fields) for _, fields in batches(scopes, formats))


def prepare(engine: Engine, scopes: Iterable[Scopes], formats: Sequence[str] = (),
            step: Callable[[str, int], None] = lambda _format, _n: None) -> None:
    """Prepare ``scopes`` in the database of ``engine`` (hivenet.prepare_scope), each batch
    in a transaction of its own, calling ``step(format, scopes)`` after each. The role must
    be granted ``hivenet_admin`` (or own the schema); a hivenet error is raised as its
    class."""
    for name, fields in batches(scopes, formats):
        with engine.begin() as conn, translated():
            conn.execute(text("SELECT hivenet.prepare_scope(:f, CAST(:s AS jsonb))"),
                         {"f": name, "s": json.dumps(fields)})
        step(name, len(fields))


def prepare_url(url: str, lines: Iterable[str]) -> int:
    """Prepare the scopes of ``lines`` (as in a file) in the database of libpq ``url``, on a
    short-lived engine of its own; returns how many scopes that is."""
    found = read(lines)
    with engine_for(url) as engine:
        prepare(engine, found)
    return count(found)
