"""Seed 001's counter key: which fields form a format's counter scope, which are only printed,
and strict format definitions (unknown keys and kinds refused)."""

from __future__ import annotations

import json

import psycopg
import pytest

from hivenet_db import parse_serial
from tests.helpers import SetClock, scalar

WHEN = "2015-07-10 23:01:10+00"


def _id(db: psycopg.Connection, recon_type: str, merchant: str, shard: str = "05") -> str:
    serial: str = scalar(db, "SELECT hivenet.next_serial('id_service', %s)", (json.dumps(
        {"recon_type": recon_type, "merchant": merchant, "shard": shard}),))
    return serial


def test_id_service_counts_per_reconciliation_type_and_prints_the_merchant(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    fake_clock(db, WHEN)
    for recon_type in ("01", "02"):
        db.execute("SELECT hivenet.prepare_scope('id_service', %s)", (json.dumps(
            {"recon_type": recon_type, "merchant": "000000000000", "shard": "05"}),))
    # Two merchants under one reconciliation type share one daily counter...
    assert _id(db, "01", "111111111111") == "111111111111" "20150710" "05" "000001"
    assert _id(db, "01", "222222222222") == "222222222222" "20150710" "05" "000002"
    # ...and another type counts apart; the type is not printed.
    assert _id(db, "02", "111111111111") == "111111111111" "20150710" "05" "000001"
    assert _id(db, "01", "111111111111") == "111111111111" "20150710" "05" "000003"
    assert db.execute("SELECT scope, fields FROM hivenet.scope WHERE format = 'id_service' "
                      "ORDER BY scope").fetchall() == [
        ("0105", {"recon_type": "01", "shard": "05"}),
        ("0205", {"recon_type": "02", "shard": "05"})]
    expected = {"format": "id_service", "merchant": "111111111111", "date": "2015-07-10",
                "shard": "05", "seq": 3}
    serial = "111111111111" "20150710" "05" "000003"
    assert scalar(db, "SELECT hivenet.parse_serial(%s, 'id_service')", (serial,)) == expected
    assert parse_serial(serial, "id_service").fields == {"merchant": "111111111111",
                                                          "shard": "05"}


def test_new_counter_keys_wait_in_one_scope_per_key(
        db: psycopg.Connection, fake_clock: SetClock) -> None:
    """Before maintain(), a new key draws from the cold counter: recorded once per key, not
    per merchant, and maintain() gives it a sequence named after the key."""
    fake_clock(db, WHEN)
    first = _id(db, "07", "111111111111")
    second = _id(db, "07", "222222222222")
    assert first[-6:] < second[-6:]
    assert {r[0] for r in db.execute(
        "SELECT scope FROM hivenet.scope_pending WHERE format = 'id_service'")} == {"0705"}
    db.execute("SELECT hivenet.maintain()")
    assert scalar(db, "SELECT sequence_name FROM hivenet.scope WHERE format = 'id_service'") \
        == "seq_id_service_0705"
    assert _id(db, "07", "333333333333")[-6:] > second[-6:]


def test_a_custom_format_may_print_a_field_outside_its_counter(db: psycopg.Connection) -> None:
    db.execute("""SELECT hivenet.define_format('till', '[
        {"field": "shop", "width": 3, "charset": "digit", "counter": false},
        {"literal": "-"}, {"seq": 4, "reset": "never"}]')""")
    db.execute("""SELECT hivenet.prepare_scope('till', '{"shop": "001"}')""")
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
