"""hivenet_db.metrics and `hivenet-db metrics` against the real test database: the values are
the ones the test created, and the exposition is what prometheus_client parses."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from hivenet_db import metrics
from hivenet_db._execute import SyncDB
from hivenet_db.tools.embedded_postgres import EmbeddedPostgres
from tests.command import in_process
from tests.helpers import SYNC_KINDS, share_fallback, sync_connection

parser = pytest.importorskip("prometheus_client.parser")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parsed(exposition: str) -> Samples:
    """Every sample of a text exposition, keyed by name and sorted labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in parser.text_string_to_metric_families(exposition)
            for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def _partition_days(db: psycopg.Connection) -> list[dt.date]:
    names = db.execute("SELECT relname FROM pg_class WHERE relnamespace = 'hivenet'::regnamespace "
                       "AND relname ~ '^interface_call_[0-9]{8}$'").fetchall()
    return sorted(dt.datetime.strptime(n[-8:], "%Y%m%d").date() for (n,) in names)


def _epoch(day: dt.date) -> float:
    return dt.datetime.combine(day, dt.time(), dt.UTC).timestamp()


@pytest.fixture
def activity(db: psycopg.Connection) -> None:
    """3 unified serials in a prepared scope (another prepared one stays idle), 2 system
    serials of an unprepared scope (its format's shared fallback), a step stuck past its 1 µs
    lease, three keyed requests (one stuck, one done, one failed), a claim and an interface
    call."""
    db.execute("SELECT hivenet.maintain()")
    db.execute("""SELECT hivenet.prepare_scope('unified',
                  '[{"system": "C0001", "module": "A01", "instance": "01"},
                    {"system": "C0001", "module": "A01", "instance": "02"}]')""")
    db.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '01') "
               "FROM generate_series(1, 3)")
    share_fallback(db, "system")
    step = db.execute("SELECT hivenet.next_system_serial('C0009', 'A01', '01')").fetchone()[0]
    db.execute("SELECT hivenet.next_system_serial('C0009', 'A01', '01')")
    db.execute("SELECT * FROM hivenet.begin_step(%s, '{}', lease => '1 microsecond')", (step,))
    db.execute("SELECT * FROM hivenet.begin_request('metrics-test', 'stuck', '{}', "
               "lease => '1 microsecond')")
    for key, succeeded in (("done", True), ("failed", False)):
        db.execute("SELECT * FROM hivenet.begin_request('metrics-test', %s)", (key,))
        db.execute("SELECT hivenet.finish_request('metrics-test', %s, 1, %s)", (key, succeeded))
    db.execute("SELECT hivenet.claim('metrics-test', 'k1')")
    call = db.execute("SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')"
                      ).fetchone()[0]
    db.execute("SELECT hivenet.claim_interface_serial(%s)", (call,))


@pytest.fixture(params=SYNC_KINDS)
def admin_conn(request: pytest.FixtureRequest, hivenet_admin_url: str) -> Iterator[SyncDB]:
    """metrics.read's connection, once per kind it accepts, as an operator's login granted
    only hivenet_admin (the role docs/operations.md gives the metrics job)."""
    with sync_connection(request.param, hivenet_admin_url) as conn:
        yield conn


def test_values_match_what_the_test_created(activity: None, admin_conn: SyncDB,
                                            db: psycopg.Connection) -> None:
    samples = parsed(metrics.exposition(metrics.read(admin_conn)))
    unified = {"format": "unified", "scope": "C0001A0101"}
    assert value(samples, "hivenet_scope_issued", **unified) == 3
    capacity = value(samples, "hivenet_scope_capacity", **unified)
    assert value(samples, "hivenet_scope_remaining", **unified) == capacity - 3
    assert value(samples, "hivenet_scope_headroom_ratio", **unified) == (capacity - 3) / capacity
    # The unprepared scope's shared fallback; no series for the idle prepared scope, and
    # every fallback's headroom (the alert on unprepared scopes reads it).
    assert value(samples, "hivenet_scope_issued", format="system",
                 scope="(unprepared scopes)") == 2
    assert not any(("scope", "C0001A0102") in k[1] for k in samples)
    assert value(samples, "hivenet_scope_headroom_ratio", format="unified",
                 scope="(unprepared scopes)") == 1
    assert value(samples, "hivenet_stuck_steps") == 1
    assert value(samples, "hivenet_stuck_step_overdue_seconds") > 0
    assert value(samples, "hivenet_steps", state="processing") == 1
    assert value(samples, "hivenet_steps", state="success") == 0
    assert value(samples, "hivenet_stuck_requests") == 1
    assert value(samples, "hivenet_stuck_request_overdue_seconds") > 0
    for state in ("processing", "success", "failed"):
        assert value(samples, "hivenet_requests", namespace="metrics-test", state=state) == 1
    assert not any(k[0] == "hivenet_requests" and ("namespace", "hivenet.steps") in k[1]
                   for k in samples)  # steps are hivenet_steps
    assert value(samples, "hivenet_claims") == 1
    calls = {k: v for k, v in samples.items() if k[0] == "hivenet_interface_calls"}
    assert list(calls.values()) == [1]
    assert dict(next(iter(calls))[1])["target_system"] == "B0001"

    days = _partition_days(db)
    today = db.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()[0]
    assert value(samples, "hivenet_interface_partition_oldest_day_timestamp_seconds") == \
        _epoch(days[0])
    assert value(samples, "hivenet_interface_partition_newest_day_timestamp_seconds") == \
        _epoch(days[-1])
    assert value(samples, "hivenet_interface_partition_days_ahead") == (days[-1] - today).days >= 1
    assert value(samples, "hivenet_interface_call_default_rows") == 0


def test_maintain_not_run_shows_in_partitions(db: psycopg.Connection) -> None:
    """Without today's and later partitions (maintain() not run), calls land in the default
    partition and days_ahead drops under 1: the alert of docs/operations.md fires."""
    today = db.execute("SELECT (now() AT TIME ZONE 'UTC')::date").fetchone()[0]
    for day in _partition_days(db):
        if day >= today:
            db.execute(f"DROP TABLE hivenet.interface_call_{day:%Y%m%d}")
    call = db.execute("SELECT hivenet.next_interface_serial('C0001', 'A01', '01', 'B0001')"
                      ).fetchone()[0]
    db.execute("SELECT hivenet.claim_interface_serial(%s)", (call,))
    samples = parsed(metrics.exposition(metrics.read(db)))
    assert value(samples, "hivenet_interface_call_default_rows") == 1
    ahead = [v for k, v in samples.items() if k[0] == "hivenet_interface_partition_days_ahead"]
    assert all(v < 1 for v in ahead)  # no partition left, or only past days


def test_collector_serves_the_same_samples(activity: None, hivenet_engine: Engine) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(metrics.HivenetCollector(hivenet_engine))
    served = parsed(generate_latest(registry).decode())
    with hivenet_engine.connect() as conn:
        printed = parsed(metrics.exposition(metrics.read(conn)))
    for overdue in (("hivenet_stuck_step_overdue_seconds", ()),
                    ("hivenet_stuck_request_overdue_seconds", ())):
        # the clock moved between the reads
        assert 0 < served.pop(overdue) < printed.pop(overdue)
    assert served == printed
    assert value(served, "hivenet_claims") == 1


@pytest.mark.parametrize("label", ['a "quoted" name', "back\\slash", "two\nlines", "naïve"])
def test_exposition_escapes_labels_and_help(label: str) -> None:
    metric = metrics.Metric("hivenet_test", 'help with \\ and\nnewline "quotes"',
                            [metrics.Sample({"scope": label}, 0.25),
                             metrics.Sample({"scope": "big"}, 1e20)])
    (family,) = parser.text_string_to_metric_families(metrics.exposition([metric]))
    assert family.documentation == metric.help
    assert [(s.labels, s.value) for s in family.samples] == [({"scope": label}, 0.25),
                                                              ({"scope": "big"}, 1e20)]


def _names(families: Iterable[dict[str, object]]) -> set[object]:
    return {f["name"] for f in families}


def test_command_prints_the_exposition(activity: None, hivenet_url: str,
                                       db: psycopg.Connection) -> None:
    def run(*args: str) -> str:
        result = in_process("metrics", "--url", hivenet_url, *args)
        assert result.returncode == 0 and result.stderr == "", result.stderr
        return result.stdout

    samples = parsed(run())
    assert value(samples, "hivenet_scope_issued", format="unified", scope="C0001A0101") == 3
    assert value(samples, "hivenet_stuck_steps") == 1
    as_json = json.loads(run("--json"))
    assert _names(as_json) == {spec.name for spec in metrics.METRICS}
    (claims,) = [m for m in as_json if m["name"] == "hivenet_claims"]
    assert claims["samples"] == [{"labels": {}, "value": 1.0}]


LAST_RUN = "hivenet_maintain_last_run_timestamp_seconds"


def test_last_maintain_run_is_0_before_the_first_and_now_after_each(
        db: psycopg.Connection, fake_clock: Callable[[psycopg.Connection, str], None]) -> None:
    assert value(parsed(metrics.exposition(metrics.read(db))), LAST_RUN) == 0
    db.execute("SELECT hivenet.maintain()")
    first = value(parsed(metrics.exposition(metrics.read(db))), LAST_RUN)
    assert abs(first - dt.datetime.now(dt.UTC).timestamp()) < 5
    # A fake business clock does not move it (the wall clock is what an alert compares).
    fake_clock(db, "2030-01-01 00:00:00+00")
    db.execute("SELECT hivenet.maintain()")
    second = value(parsed(metrics.exposition(metrics.read(db))), LAST_RUN)
    assert first < second < dt.datetime.now(dt.UTC).timestamp() + 1
    assert db.execute("SELECT count(*) FROM hivenet.maintain_run").fetchone()[0] == 1


def test_a_failed_maintain_run_is_not_recorded(connect: Callable[..., psycopg.Connection],
                                               db: psycopg.Connection) -> None:
    conn = connect(autocommit=False)
    conn.execute("SELECT hivenet.maintain()")
    conn.rollback()  # as a run that fails after its last step
    assert value(parsed(metrics.exposition(metrics.read(db))), LAST_RUN) == 0


VERSIONS = Path(__file__).resolve().parents[1] / "migrations" / "versions"


def test_hivenet_admin_reads_every_metric_after_the_upgrade(hivenet_server: EmbeddedPostgres
                                                            ) -> None:
    """The revisions run the role grants again: with role hivenet_admin present (created
    here, and dropped again, when the server has none), the revisions replayed up to head
    let it run maintain() and read every metric, the last run included."""
    # The upgrade scripts only, in order (not a revision's .downgrade.sql, nor the parts
    # written by hand, which its script holds).
    frozen = sorted(p for p in VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.sql")
                    if p.name.count(".") == 1)
    assert all("SELECT hivenet._grant_roles();" in p.read_text(encoding="utf-8")
               for p in frozen)
    dbname = "hivenet_metrics_admin"
    url = hivenet_server.ensure_database(dbname)
    created = False
    try:
        with psycopg.connect(url) as conn:
            try:
                if conn.execute("SELECT to_regrole('hivenet_admin') IS NULL").fetchone()[0]:
                    conn.execute("CREATE ROLE hivenet_admin NOLOGIN")
                    created = True
                for revision in frozen:
                    conn.execute(revision.read_text(encoding="utf-8"))
                # Committed, as a migration is: an enum value a revision adds (0002:
                # 'expired') may not be read in the transaction that added it.
                conn.commit()
                conn.execute("SET LOCAL ROLE hivenet_admin")
                assert value(parsed(metrics.exposition(metrics.read(conn))), LAST_RUN) == 0
                conn.execute("SELECT hivenet.maintain()")
                last = value(parsed(metrics.exposition(metrics.read(conn))), LAST_RUN)
                assert abs(last - dt.datetime.now(dt.UTC).timestamp()) < 5
            finally:
                conn.rollback()
    finally:
        hivenet_server.drop_database(dbname)
        if created:
            with psycopg.connect(hivenet_server.url(), autocommit=True) as conn:
                conn.execute("DROP ROLE hivenet_admin")
