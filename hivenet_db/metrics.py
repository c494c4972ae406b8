"""Prometheus metrics of a hivenet database: what an operator alerts on (docs/operations.md).

``read(db)`` runs the read-only queries of ``hivenet_db/queries/metrics.sql`` on any
connection the repositories accept and returns gauges; ``exposition`` writes them in the
Prometheus text format (``hivenet-db metrics``), and ``HivenetCollector`` hands them to
``prometheus_client`` (extra ``[metrics]``) for an application's own ``/metrics`` endpoint::

    from prometheus_client import REGISTRY
    from hivenet_db.metrics import HivenetCollector

    REGISTRY.register(HivenetCollector(engine))   # one connection of engine per scrape

Every metric of the database is read at scrape time: nothing is kept in the process, so any
number of processes (or the command) report the same values. All are gauges but
``hivenet_request_decisions_total``, a counter the database keeps (hivenet_db/sql/decisions.sql).

One metric is the application's own, kept in its process: ``hivenet_request_check_seconds``,
a histogram of how long the idempotency middlewares' check of a key took (``timed_check``),
in ``prometheus_client``'s default registry when it is installed.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine

from hivenet_db._execute import SyncDB, mappings
from hivenet_db.statements import named

if TYPE_CHECKING:
    from prometheus_client import Histogram
    from prometheus_client.metrics_core import Metric as PromMetric

INSTALL_HINT = "pip install 'hivenet-db[metrics]'"


@dataclass(frozen=True)
class Spec:
    """Metric ``name`` is column ``column`` of query ``query``, labelled by ``labels``; a
    ``gauge`` or a ``counter`` (its name ends in ``_total``)."""

    query: str
    column: str
    name: str
    help: str
    labels: tuple[str, ...] = ()
    kind: str = "gauge"


SCOPE = ("format", "scope")
# One row per metric; the queries are in hivenet_db/queries/metrics.sql.
METRICS = (
    Spec("scope_usage", "issued", "hivenet_scope_issued",
         "serials issued in the current period of the scope, for the scopes that issued in it "
         "(scope '(unprepared scopes)': the format's shared fallback counter, which its scopes "
         "not prepared draw from where the format opts in, always exported)", SCOPE),
    Spec("scope_usage", "capacity", "hivenet_scope_capacity",
         "serials a period of the scope can hold", SCOPE),
    Spec("scope_usage", "remaining", "hivenet_scope_remaining",
         "serials left in the current period of the scope", SCOPE),
    Spec("scope_usage", "headroom", "hivenet_scope_headroom_ratio",
         "remaining / capacity of the current period of the scope (0 to 1)", SCOPE),
    Spec("clock_lead", "lead_seconds", "hivenet_clock_lead_seconds",
         "how far the latest instant the format issued is ahead of the database clock (0 "
         "when it is not): a clock that stepped back, until it catches up; what the format "
         "then does is its clock policy (hivenet.set_clock_policy)", ("format",)),
    Spec("stuck_steps", "steps", "hivenet_stuck_steps",
         "processing steps past their lease (resolve with hivenet.resolve_step)"),
    Spec("stuck_steps", "overdue_seconds", "hivenet_stuck_step_overdue_seconds",
         "how long past its lease the oldest stuck step is (0 when none)"),
    Spec("step_states", "steps", "hivenet_steps", "steps per state of their latest attempt",
         ("state",)),
    Spec("stuck_requests", "requests", "hivenet_stuck_requests",
         "processing keyed requests past their lease (resolve with hivenet.resolve_request)"),
    Spec("stuck_requests", "overdue_seconds", "hivenet_stuck_request_overdue_seconds",
         "how long past its lease the oldest stuck keyed request is (0 when none)"),
    Spec("request_states", "requests", "hivenet_requests",
         "keyed requests per namespace and state of their latest attempt",
         ("namespace", "state")),
    Spec("claims", "claims", "hivenet_claims", "rows of hivenet.claim_record (taken claims)"),
    Spec("interface_calls_per_day", "calls", "hivenet_interface_calls",
         "recorded interface calls per serial day, source and target system",
         ("day", "source_system", "target_system")),
    Spec("interface_partitions", "oldest_day_seconds",
         "hivenet_interface_partition_oldest_day_timestamp_seconds",
         "oldest daily partition of hivenet.interface_call (its day at 00:00 UTC)"),
    Spec("interface_partitions", "newest_day_seconds",
         "hivenet_interface_partition_newest_day_timestamp_seconds",
         "newest daily partition of hivenet.interface_call (its day at 00:00 UTC)"),
    Spec("interface_partitions", "days_ahead", "hivenet_interface_partition_days_ahead",
         "newest partition day minus today (business time zone); maintain() keeps it at 2, "
         "under 1 it has not run for a day"),
    Spec("interface_partitions", "default_rows", "hivenet_interface_call_default_rows",
         "interface calls in the default partition (days maintain() had not prepared)"),
    Spec("maintain_run", "last_run_seconds", "hivenet_maintain_last_run_timestamp_seconds",
         "when hivenet.maintain() last finished (unix time; 0 before its first run)"),
    Spec("failover", "gap", "hivenet_failover_gap",
         "how far a fence moves every counter after a promotion (setting failover_gap)"),
    Spec("failover", "loss_window_seconds", "hivenet_failover_loss_window_seconds",
         "the longest stretch of commits a failover may lose, as declared (setting "
         "failover_loss_window)"),
    Spec("allocation_rate", "peak_per_second", "hivenet_allocation_peak_per_second",
         "serials a second of the format, the highest between two runs of maintain() today "
         "or yesterday: times hivenet_failover_loss_window_seconds, at most "
         "hivenet_failover_gap", ("format",)),
    Spec("request_decisions", "decisions", "hivenet_request_decisions_total",
         "begins of keyed requests and steps (namespace hivenet.steps) per namespace and "
         "decision, committed or not: started, replayed, in_progress, mismatch, rejected, "
         "expired", ("namespace", "decision"), kind="counter"),
)


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Metric:
    """A metric and its samples (none when there is nothing to measure, e.g. no partition)."""

    name: str
    help: str
    samples: list[Sample]
    kind: str = "gauge"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "help": self.help, "type": self.kind,
                "samples": [{"labels": s.labels, "value": s.value} for s in self.samples]}


def queries() -> dict[str, str]:
    """The named queries of hivenet_db/queries/metrics.sql."""
    return named("metrics.sql")


def read(db: SyncDB) -> list[Metric]:
    """Every metric, read now on ``db`` (a SQLAlchemy Connection or Session, or a psycopg
    Connection; read only, never commits). Each query runs once."""
    results = {name: mappings(db, statement) for name, statement in queries().items()}
    return [Metric(spec.name, spec.help,
                   [Sample({label: str(row[label]) for label in spec.labels},
                           float(row[spec.column]))
                    for row in results[spec.query] if row[spec.column] is not None],
                   spec.kind)
            for spec in METRICS]


def _escape(value: str, quote: bool) -> str:
    value = value.replace("\\", "\\\\").replace("\n", "\\n")
    return value.replace('"', '\\"') if quote else value


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def exposition(metrics: list[Metric]) -> str:
    """``metrics`` in the Prometheus text exposition format 0.0.4, the format
    ``prometheus_client`` parses; written here so the command needs no extra package."""
    lines: list[str] = []
    for metric in metrics:
        lines += [f"# HELP {metric.name} {_escape(metric.help, quote=False)}",
                  f"# TYPE {metric.name} {metric.kind}"]
        for sample in metric.samples:
            labels = ",".join(f'{k}="{_escape(v, quote=True)}"' for k, v in sample.labels.items())
            lines.append(f"{metric.name}{{{labels}}} {_number(sample.value)}" if labels
                         else f"{metric.name} {_number(sample.value)}")
    return "\n".join(lines) + "\n"


class HivenetCollector:
    """A ``prometheus_client`` collector: every scrape reads the metrics on a connection of
    ``engine`` (needs the extra: ``pip install 'hivenet-db[metrics]'``)."""

    def __init__(self, engine: Engine) -> None:
        _prometheus_client()  # fail at registration, not at the first scrape
        self.engine = engine

    def describe(self) -> list[PromMetric]:
        # Empty: registering must not query the database (the names are in METRICS).
        return []

    def collect(self) -> Iterator[PromMetric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self.engine.connect() as conn:
            metrics = read(conn)
        for spec, metric in zip(METRICS, metrics, strict=True):  # read keeps METRICS' order
            family = (CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily)(
                metric.name, metric.help, labels=spec.labels)
            for sample in metric.samples:
                family.add_metric([sample.labels[label] for label in spec.labels],
                                  sample.value)
            yield family


# --- the application's own: the latency of the check ----------------------------------------

CHECK_SECONDS = "hivenet_request_check_seconds"
#: From half a millisecond (a begin on a near database) to the longest ``wait`` worth a bucket.
CHECK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                 5.0, 10.0)


_check_lock = threading.Lock()
_check: list[Histogram | None] = []  # made once, by the first check of the process


def check_histogram() -> Histogram | None:
    """The histogram ``hivenet_request_check_seconds{namespace}`` in ``prometheus_client``'s
    default registry (made on first use, once whatever the threads), or None without
    ``prometheus_client``."""
    if not _check:
        with _check_lock:
            if not _check:
                _check.append(_new_check_histogram())
    return _check[0]


def _new_check_histogram() -> Histogram | None:
    try:
        from prometheus_client import Histogram
    except ModuleNotFoundError:
        return None
    return Histogram(CHECK_SECONDS, "seconds the idempotency middleware's check of a key took "
                     "(hivenet.begin_request until its decision: started, replayed or refused; "
                     "with wait, the wait included), per namespace", ("namespace",),
                     buckets=CHECK_BUCKETS)


@contextmanager
def timed_check(namespace: str) -> Iterator[None]:
    """Observe how long the block (a covered request's check) takes in
    ``hivenet_request_check_seconds{namespace}``, also when it raises (a refusal); nothing
    without ``prometheus_client``."""
    histogram = check_histogram()
    if histogram is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        histogram.labels(namespace).observe(time.perf_counter() - started)


def _prometheus_client() -> None:
    try:
        import prometheus_client  # noqa: F401
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(f"hivenet_db.metrics.HivenetCollector needs prometheus_client: "
                                  f"{INSTALL_HINT}", name=error.name) from None
