"""The Grafana dashboard (docs/operations/grafana-dashboard.json) and the Prometheus rules
(docs/operations/decision-rules.yaml, and the alert rules of docs/operations.md) query only
metrics that are really emitted: every metric name in their expressions is a sample of the
exposition `hivenet-db metrics` reads from a real database, of the exposition of an
application's process after a middleware's check (the histogram of the check), or a recording
rule the rules define."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.command import in_process

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "operations" / "grafana-dashboard.json"
RULES = ROOT / "docs" / "operations" / "decision-rules.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"

# PromQL words that are not metric names (functions are told by their parenthesis).
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric (and recording rule) names a PromQL expression reads."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # label values, regexes
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\blabel_values\(\s*([\w:]+)\s*,\s*\w+\s*\)", r"\1", expr)
    words = re.finditer(r"(?<![\w.:])[a-zA-Z_:][\w:]*", expr)
    return {word[0] for word in words if word[0].lower() not in KEYWORDS
            and not expr[word.end():].lstrip().startswith("(")}  # a function


def _dashboard_exprs(node: Any) -> Iterator[str]:
    """Every query of the dashboard: panels' targets (rows' panels too) and variables."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from _dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dashboard_exprs(item)


def _rule_lines(text: str, field: str) -> list[str]:
    """The one-line values of ``field:`` in Prometheus rules YAML (no block scalars here)."""
    values = re.findall(rf"^\s*-?\s*{field}:\s*(.*)$", text, flags=re.M)
    assert all(v and v[0] not in "|>" for v in values), f"{field}: keep each on one line"
    return values


def _rules_texts() -> list[str]:
    blocks = re.findall(r"^```yaml\n(.*?)^```", OPERATIONS.read_text(encoding="utf-8"),
                        flags=re.M | re.S)
    return [RULES.read_text(encoding="utf-8"), *blocks]


def test_metric_names_are_found_and_others_are_not() -> None:
    """The extraction the checks below rely on."""
    assert metric_names('sum by (namespace) (rate(hivenet_request_decisions_total'
                        '{decision=~"replayed|in_progress"}[5m])) / sum(rate(x_total[5m])) '
                        '> 0.01 and on (namespace) up') == {
        "hivenet_request_decisions_total", "x_total", "up"}
    assert metric_names("time() - hivenet_maintain_last_run_timestamp_seconds > 86400") == {
        "hivenet_maintain_last_run_timestamp_seconds"}
    assert metric_names("hivenet:request_interception:ratio_rate5m > 0.2") == {
        "hivenet:request_interception:ratio_rate5m"}
    assert metric_names("label_values(hivenet_requests, namespace)") == {"hivenet_requests"}


@pytest.fixture
def emitted(db: psycopg.Connection, hivenet_url: str) -> set[str]:
    """The sample names `hivenet-db metrics` prints for a database that has done a little of
    everything (a serial, a keyed request, a step, maintain())."""
    db.execute("SELECT hivenet.next_unified_serial('C0001', 'A01', '01')")
    db.execute("SELECT * FROM hivenet.begin_request('orders', 'k1')")
    serial = db.execute("SELECT hivenet.next_system_serial('C0001', 'A01', '01')").fetchone()
    assert serial is not None
    db.execute("SELECT * FROM hivenet.begin_step(%s)", serial)
    db.execute("SELECT hivenet.maintain()")
    result = in_process("metrics", "--url", hivenet_url)
    assert result.returncode == 0, result.stderr
    return samples(result.stdout) | application_samples()


def samples(exposition: str) -> set[str]:
    return {line.split("{")[0].split(" ")[0] for line in exposition.splitlines()
            if line and not line.startswith("#")}


def application_samples() -> set[str]:
    """The sample names hivenet puts in an application's own registry once a middleware
    checked a key (hivenet_db.metrics.timed_check, what both middlewares call)."""
    from prometheus_client import REGISTRY, generate_latest

    from hivenet_db.metrics import CHECK_SECONDS, timed_check

    with timed_check("orders"):
        pass
    return {name for name in samples(generate_latest(REGISTRY).decode())
            if name.startswith(CHECK_SECONDS)}


def test_the_application_s_histogram_is_emitted() -> None:
    assert {"hivenet_request_check_seconds_bucket", "hivenet_request_check_seconds_count",
            "hivenet_request_check_seconds_sum"} <= application_samples()


def test_every_dashboard_panel_queries_emitted_metrics(emitted: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = list(_dashboard_exprs(dashboard))
    assert len(exprs) >= len(dashboard["panels"])
    for panel in dashboard["panels"]:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
    read = set().union(*(metric_names(expr) for expr in exprs))
    assert {"hivenet_request_decisions_total", "hivenet_request_check_seconds_bucket"} <= read
    assert read - emitted == set(), "the dashboard reads metrics the exporter does not emit"


def test_every_rule_reads_emitted_metrics_or_recorded_rules(emitted: set[str]) -> None:
    texts = _rules_texts()
    recorded = {name for text in texts for name in _rule_lines(text, "record")}
    exprs = [expr for text in texts for expr in _rule_lines(text, "expr")]
    assert len(exprs) >= 10 and "hivenet:request_interception:ratio_rate5m" in recorded
    read = set().union(*(metric_names(expr) for expr in exprs))
    assert "hivenet_request_decisions_total" in read
    assert read - emitted - recorded == set(), "rules read metrics the exporter does not emit"
