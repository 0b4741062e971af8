"""deploy/grafana/heddle.json: every expression names metrics the project exports (with the
sample suffixes of their type and the labels they have), and the panels the dashboard promises
are there."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from heddle.observability import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "heddle.json"
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}
_SELECTOR = re.compile(r"\b(heddle_[a-z0-9_]+)\s*(\{([^}]*)\})?")
_GROUPING = re.compile(r"\bby\s*\(([^)]*)\)")
_SCRAPE_LABELS = {"job", "instance", "le"}
"""Labels Prometheus adds (target labels) or that histograms carry."""


def exported() -> dict[str, set[str]]:
    """Sample name -> label names, for every metric family ``Metrics`` registers."""
    metrics = Metrics()
    samples: dict[str, set[str]] = {}
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            kind = value._type
            for suffix in _SUFFIXES[kind]:
                samples[f"{value._name}{suffix}"] = set(value._labelnames)
    return samples


def _expressions(node: Any) -> list[str]:
    """Every PromQL string in the dashboard: panel targets and template queries."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            else:
                found.extend(_expressions(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_expressions(item))
    return found


def check_expression(expression: str, samples: dict[str, set[str]]) -> set[str]:
    """The metric names ``expression`` uses; AssertionError for one not exported, or a label
    the metric does not have."""
    used = set()
    for match in _SELECTOR.finditer(expression):
        name, selector = match.group(1), match.group(3) or ""
        assert name in samples, f"{name} in {expression!r} is not a metric heddle exports"
        used.add(name)
        for matcher in filter(None, (part.strip() for part in selector.split(","))):
            label = re.split(r"=~|!~|!=|=", matcher)[0].strip()
            allowed = samples[name] | _SCRAPE_LABELS
            assert label in allowed, f"{name} has no label {label!r} ({expression!r})"
    assert used, f"{expression!r} names no heddle metric"
    labels = set().union(*(samples[name] for name in used)) | _SCRAPE_LABELS
    for grouping in _GROUPING.findall(expression):
        for label in filter(None, (part.strip() for part in grouping.split(","))):
            assert label in labels, f"grouping by {label!r} in {expression!r}"
    return used


def test_every_expression_names_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    samples = exported()
    expressions = _expressions(dashboard)
    assert len(expressions) >= 15
    used = set().union(*(check_expression(e, samples) for e in expressions))
    promised = {
        "heddle_rollout_trajectories_total",  # rollout progress
        "heddle_worker_tokens_per_second",
        "heddle_worker_running",  # batch
        "heddle_worker_waiting",  # queue
        "heddle_worker_kv_usage",
        "heddle_decide_seconds_bucket",  # decision latency
        "heddle_consumer_lag_messages",
        "heddle_dead_letters",
        "heddle_recomputed_tokens_total",  # re-prefilled tokens
    }
    assert promised <= used, promised - used


def test_the_check_catches_unknown_metrics_and_labels() -> None:
    samples = exported()
    with pytest.raises(AssertionError, match="not a metric"):
        check_expression("rate(heddle_tokens_total[5m])", samples)
    with pytest.raises(AssertionError, match="no label 'pool'"):
        check_expression('heddle_worker_running{pool="x"}', samples)
    with pytest.raises(AssertionError, match="grouping by 'worker'"):
        check_expression("sum by (worker) (heddle_consumer_lag_messages)", samples)
    with pytest.raises(AssertionError, match="not a metric"):
        check_expression("heddle_step_seconds", samples)  # a histogram has no bare sample


def test_panels_have_unique_ids_and_a_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert {"datasource", "worker"} <= variables
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
