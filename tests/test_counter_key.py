"""Seed 001's counter key: which fields form a format's counter scope, which are only printed,
and strict format definitions (unknown keys and kinds refused)."""

from __future__ import annotations

import json

import psycopg
import pytest

from hivenet_db import parse_serial
from tests.helpers import SetClock, scalar, share_fallback

WHEN = "2015-07-10 23:01:10+00"


def _id(db: psycopg.Connection, merchant: str, shard: str = "05") -> str:
    serial: str = scalar(db, "SELECT hivenet.next_serial('id_service', %s)", (json.dumps(
        {"merchant": merchant, "shard": shard}),))
    return serial


def test_id_service_counts_per_printed_merchant_and_shard(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, WHEN)
    for merchant, shard in (("111111111111", "05"), ("222222222222", "05"),
                            ("111111111111", "06")):
        db.execute("SELECT hivenet.prepare_scope('id_service', %s)", (json.dumps(
            {"merchant": merchant, "shard": shard}),))
    assert _id(db, "111111111111") == "111111111111" "20150710" "05" "000001"
    assert _id(db, "222222222222") == "222222222222" "20150710" "05" "000001"
    assert _id(db, "111111111111", "06") == "111111111111" "20150710" "06" "000001"
    assert _id(db, "111111111111") == "111111111111" "20150710" "05" "000002"
    assert db.execute("SELECT scope, fields FROM hivenet.scope WHERE format = 'id_service' "
                      "AND scope !~ '^123456789012' ORDER BY scope").fetchall() == [
        ("11111111111105", {"merchant": "111111111111", "shard": "05"}),
        ("11111111111106", {"merchant": "111111111111", "shard": "06"}),
        ("22222222222205", {"merchant": "222222222222", "shard": "05"})]
    expected = {"format": "id_service", "merchant": "111111111111", "date": "2015-07-10",
                "shard": "05", "seq": 2}
    serial = "111111111111" "20150710" "05" "000002"
    assert scalar(db, "SELECT hivenet.parse_serial(%s, 'id_service')", (serial,)) == expected
    assert parse_serial(serial, "id_service").fields == {"merchant": "111111111111",
                                                          "shard": "05"}


def test_three_reconciliation_types_of_one_merchant_print_three_serials(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    """Seed 001's first requirement is global uniqueness: the serials of one statement issuing
    for types 01, 02 and 03 of one merchant and shard differ (a counter per type, not printed,
    printed the same serial three times). A type is not needed to allocate, and refused."""
    fake_clock(db, WHEN)
    fields = json.dumps({"merchant": "123456789012", "shard": "05"})
    db.execute("SELECT hivenet.prepare_scope('id_service', %s)", (fields,))
    serials = [row[0] for row in db.execute(
        "SELECT hivenet.next_serial('id_service', %s) FROM (VALUES ('01'), ('02'), ('03')) "
        "AS t(recon_type)", (fields,))]
    assert serials == ["123456789012" "20150710" "05" + seq
                       for seq in ("000001", "000002", "000003")]
    with pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT hivenet.next_serial('id_service', %s)", (json.dumps(
            {"recon_type": "01", "merchant": "123456789012", "shard": "05"}),))
    assert refused.value.diag.sqlstate == "HN001"
    assert "has no field 'recon_type'" in (refused.value.diag.message_primary or "")


def test_drawing_from_the_fallback_records_each_draw_of_a_scope(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    """With the fallback, a new scope draws from the format's shared counter: each draw
    recorded with its scope, and maintain() (where asked) gives it a sequence named after the
    scope."""
    fake_clock(db, WHEN)
    share_fallback(db, "id_service", promote=True)
    first = _id(db, "111111111111", "07")
    second = _id(db, "111111111111", "07")
    assert first[-6:] < second[-6:]
    assert db.execute("SELECT scope, serials FROM hivenet.fallback_draw "
                      "WHERE format = 'id_service'").fetchall() == [("11111111111107", 1)] * 2
    db.execute("SELECT hivenet.maintain()")
    assert scalar(db, "SELECT sequence_name FROM hivenet.scope WHERE format = 'id_service' "
                      "AND scope = '11111111111107'") == "seq_id_service_11111111111107"
    assert _id(db, "111111111111", "07")[-6:] > second[-6:]


def test_a_custom_format_may_print_a_field_outside_its_counter(db: psycopg.Connection) -> None:
    db.execute("""SELECT hivenet.define_format('till', '[
        {"field": "shop", "width": 3, "charset": "digit", "counter": false},
        {"literal": "-"}, {"seq": 4, "reset": "never"}]')""")
    got = [scalar(db, "SELECT hivenet.next_serial('till', %s)", (json.dumps({"shop": shop}),))
           for shop in ("001", "002", "001")]
    assert got == ["001-0001", "002-0002", "001-0003"]
    assert scalar(db, "SELECT length FROM hivenet.format WHERE name = 'till'") == 8


def _refused(db: psycopg.Connection, segments: str) -> str:
    with pytest.raises(psycopg.Error) as refused:
        db.execute("SELECT hivenet.define_format('custom', %s)", (segments,))
    assert refused.value.diag.sqlstate == "HN001"
    return refused.value.diag.message_primary or ""


@pytest.mark.parametrize(("segments", "named"), [
    ('[{"field": "x", "width": 2, "widht": 3}, {"seq": 3, "reset": "never"}]', "widht"),
    ('[{"field": "x", "width": 2}, {"seq": 3, "reset": "never", "start": 5}]', "start"),
    ('[{"literal": "A", "colour": "red"}, {"seq": 3, "reset": "never"}]', "colour"),
    ('[{"time": "YYYYMMDD", "zone": "UTC"}, {"seq": 3, "reset": "day"}]', "zone"),
    ('[{"sequence": 3}, {"seq": 3, "reset": "never"}]', "sequence"),
    ('[{"field": "x", "width": 2, "printed": "no"}, {"seq": 3, "reset": "never"}]', "printed"),
    ('[{"field": "x", "width": 2, "printed": false, "counter": false}, '
     '{"seq": 3, "reset": "never"}]', "neither printed nor part of the counter key"),
])
def test_define_format_refuses_unknown_keys_and_kinds_naming_them(
        db: psycopg.Connection, segments: str, named: str) -> None:
    assert named in _refused(db, segments)


def test_known_keys_are_still_accepted_and_stored_as_before(db: psycopg.Connection) -> None:
    db.execute("""SELECT hivenet.define_format('plain', '[
        {"field": "x", "width": 2, "charset": "digit", "min": 1, "printed": true,
         "counter": true}, {"literal": "A"}, {"time": "YYYYMMDD"},
        {"seq": 3, "reset": "day"}]')""")
    segments = scalar(db, "SELECT segments FROM hivenet.format WHERE name = 'plain'")
    assert "printed" not in segments[0] and "counter" not in segments[0]
    assert scalar(db, "SELECT key_fields FROM hivenet.format WHERE name = 'plain'") is None
