"""Counting as the standard says: one counter per scope for every built-in format, from 1 each
period in a prepared scope whatever other scopes did (seed 000: the day's order of that
channel's business); exhaustion stays in its scope; unprepared scopes are refused, or share
their format's fallback counter where it opts in (test_new_scopes.py)."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.helpers import SetClock, failure, scalar, share_fallback

DAY = "2026-11-26 10:00:00+00"
NEXT_DAY = "2026-11-27 10:00:00+00"

# Two scopes of each built-in format (fields by name), and where its seq sits in a serial.
SCOPES = {
    "unified": ({"system": "C0001", "module": "A01", "instance": "01"},
                {"system": "C0002", "module": "A01", "instance": "55"}),
    "system": ({"system": "C0001", "module": "A01", "instance": "01"},
               {"system": "C0002", "module": "A01", "instance": "55"}),
    "interface": ({"system": "C0001", "module": "A01", "instance": "01", "target": "P0001"},
                  {"system": "C0002", "module": "A01", "instance": "55", "target": "P0001"}),
    "id_service": ({"merchant": "123456789012", "shard": "07"},
                   {"merchant": "123456789012", "shard": "08"}),
    "merchant_trade": ({"merchant": "123456789012"}, {"merchant": "999999999999"}),
}
SEQ = {"unified": slice(18, 28), "system": slice(18, 30), "interface": slice(29, 39),
       "id_service": slice(22, 28), "merchant_trade": slice(26, 32)}


def _next(db: psycopg.Connection, format: str, fields: dict[str, str]) -> str:
    serial: str = scalar(db, "SELECT hivenet.next_serial(%s, %s)", (format, json.dumps(fields)))
    return serial


def _prepare(db: psycopg.Connection, format: str, *fields: dict[str, str]) -> None:
    db.execute("SELECT hivenet.prepare_scope(%s, %s)", (format, json.dumps(list(fields))))


@pytest.mark.parametrize("format", sorted(SCOPES))
def test_each_prepared_scope_counts_from_1_every_day_whatever_the_others_did(
        db: psycopg.Connection, fake_clock: SetClock, format: str) -> None:
    busy, quiet = SCOPES[format]
    fake_clock(db, DAY)
    _prepare(db, format, busy, quiet)

    def seq(fields: dict[str, str]) -> int:
        return int(_next(db, format, fields)[SEQ[format]])

    assert [seq(busy) for _ in range(5)] == [1, 2, 3, 4, 5]
    assert seq(quiet) == 1  # the busy scope took nothing of its count
    fake_clock(db, NEXT_DAY)
    assert (seq(quiet), seq(busy), seq(busy)) == (1, 1, 2)


def test_per_second_counts_from_1_every_second(db: psycopg.Connection,
                                               fake_clock: SetClock) -> None:
    fake_clock(db, "2026-11-26 10:00:00+00")
    # One scope, prepared with the format.
    assert scalar(db, "SELECT scope FROM hivenet.scope WHERE format = 'per_second'") == ""
    assert [_next(db, "per_second", {}) for _ in range(2)] == ["26112610000000001",
                                                               "26112610000000002"]
    fake_clock(db, "2026-11-26 10:00:01+00")
    assert _next(db, "per_second", {}) == "26112610000100001"


def test_the_fast_paths_count_a_prepared_scope_from_1(db: psycopg.Connection) -> None:
    """The inlined fast paths of unified and system (the real clock) serve a prepared scope
    from its own sequence: C0002/A01/55 no longer shares a lane with C0001/A01/01."""
    for fields in SCOPES["unified"]:
        _prepare(db, "unified", fields)
        _prepare(db, "system", fields)
    first = scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    assert first.endswith("0000000001")
    assert scalar(db, "SELECT hivenet.next_unified_serial('C0001', 'A01', '01')").endswith(
        "0000000002")
    assert scalar(db, "SELECT hivenet.next_unified_serial('C0002', 'A01', '55')").endswith(
        "0000000001")
    assert scalar(db, "SELECT hivenet.next_system_serial('C0002', 'A01', '55')").endswith(
        "000000000001")


def test_the_interface_serial_counts_per_channel_its_target_is_only_printed(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, DAY)
    channel = {"system": "C0001", "module": "A01", "instance": "01"}
    _prepare(db, "interface", channel)  # the target is not needed
    serials = [_next(db, "interface", {**channel, "target": target})
               for target in ("P0001", "P0002", "P0001")]
    assert [(s[10:15], s[29:]) for s in serials] == [
        ("P0001", "0000000001"), ("P0002", "0000000002"), ("P0001", "0000000003")]
    assert scalar(db, "SELECT count(*) FROM hivenet.scope WHERE format = 'interface' "
                      "AND scope LIKE 'C0001A0101%'") == 1  # no target in it


def test_exhausting_one_prepared_scope_leaves_the_others_untouched(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, DAY)
    busy, quiet = SCOPES["id_service"]
    _prepare(db, "id_service", busy, quiet)
    assert _next(db, "id_service", busy).endswith("07000001")
    db.execute("SELECT setval('hivenet.seq_id_service_12345678901207', "
               "last_value + 999997) FROM hivenet.seq_id_service_12345678901207")
    assert _next(db, "id_service", busy).endswith("07999999")
    code, message = failure(db, "SELECT hivenet.next_serial('id_service', %s)",
                            (json.dumps(busy),))
    assert code == "HN010" and "scope '12345678901207'" in message, message
    assert _next(db, "id_service", quiet).endswith("08000001")


def test_a_fallback_run_out_refuses_unprepared_scopes_never_prepared_ones(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    """One busy unprepared scope that runs its format's fallback counter out leaves every
    unprepared scope of the format refused for the day (HN010 says to prepare), and so is
    itself once prepared: it starts after every value the fallback issued (guarantee 2). A
    scope prepared before its first use is never refused because of another's use, also when
    prepared after the fallback ran out."""
    fake_clock(db, DAY)
    db.execute("""SELECT hivenet.define_format('till', '[{"field": "desk", "width": 2,
                  "charset": "digit"}, {"time": "YYYYMMDD"}, {"seq": 1, "reset": "day"}]')""")
    share_fallback(db, "till")
    _prepare(db, "till", {"desk": "01"})
    for _ in range(9):
        _next(db, "till", {"desk": "50"})  # unprepared: the fallback
    code, message = failure(db, """SELECT hivenet.next_serial('till', '{"desk": "51"}')""")
    assert code == "HN010" and "fallback counter of the unprepared scopes (scope '51'" in message
    assert "hivenet-db prepare" in message
    assert _next(db, "till", {"desk": "01"}) == "01202611261"  # prepared before: untouched
    _prepare(db, "till", {"desk": "50"}, {"desk": "52"})
    assert failure(db, """SELECT hivenet.next_serial('till', '{"desk": "50"}')""")[0] == "HN010"
    assert _next(db, "till", {"desk": "52"}) == "52202611261"  # never drew: from 1
    fake_clock(db, NEXT_DAY)
    assert _next(db, "till", {"desk": "50"}) == "50202611271"


def test_register_module_prepares_the_instances_this_database_owns(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    db.execute("SELECT hivenet.own_instances('01-03')")
    db.execute("SELECT hivenet.register_system('C0001')")
    db.execute("SELECT hivenet.register_module('C0001', 'A01')")
    assert db.execute("SELECT format, string_agg(scope, ',' ORDER BY scope) FROM hivenet.scope "
                      "WHERE scope LIKE 'C0001A01%' AND left(sequence_name, 4) = 'seq_' "
                      "GROUP BY format ORDER BY format").fetchall() == [
        (format, "C0001A0101,C0001A0102,C0001A0103")
        for format in ("interface", "system", "unified")]
    fake_clock(db, DAY)
    assert _next(db, "unified", SCOPES["unified"][0]).endswith("0000000001")
    assert scalar(db, "SELECT count(*) FROM hivenet.fallback_draw") == 0
