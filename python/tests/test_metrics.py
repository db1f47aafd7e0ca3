"""redlock_fenced.metrics() and PrometheusCollector: the Rust client's
metrics after real operations on five local nodes. The counts are global
to the process, so each test compares two snapshots."""

from __future__ import annotations

import gc
import math
import time

import pytest

import redlock_fenced as rf
from nodes import Node


def count(snapshot: dict[str, list[rf.MetricSeries]], name: str, **labels: str) -> int:
    """The value of the series of `name` with exactly `labels` (0 if none)."""
    for series in snapshot.get(name, []):
        if series["labels"] == labels:
            return series["value"]
    return 0


def delta(
    before: dict[str, list[rf.MetricSeries]],
    after: dict[str, list[rf.MetricSeries]],
    name: str,
    **labels: str,
) -> int:
    return count(after, name, **labels) - count(before, name, **labels)


def test_metrics_count_acquisitions_extensions_holds_and_losses(
    redlock: rf.Redlock, key: str
) -> None:
    gc.collect()
    before = rf.metrics()
    lock = redlock.acquire(key, 5)
    assert redlock.try_acquire(key, 5) is None
    lock.extend(5)
    assert lock.release() is True
    short = redlock.acquire(key + "-short", 0.1)
    time.sleep(0.25)
    with pytest.raises(rf.LockLostError):
        short.extend(5)
    after = rf.metrics()

    assert delta(before, after, "redlock_acquisitions_total", outcome="granted") == 2
    assert delta(before, after, "redlock_acquisitions_total", outcome="busy") == 1
    assert delta(before, after, "redlock_acquire_seconds", outcome="granted") == 2
    assert delta(before, after, "redlock_extensions_total", outcome="ok") == 1
    assert delta(before, after, "redlock_extensions_total", outcome="failed") == 1
    assert delta(before, after, "redlock_locks_lost_total") == 1
    assert delta(before, after, "redlock_hold_seconds") >= 1

    # Histograms: cumulative buckets in seconds, ending at +inf with the count.
    (hold,) = after["redlock_hold_seconds"]
    assert hold["buckets"] is not None and hold["sum"] is not None
    bounds = [bound for bound, _ in hold["buckets"]]
    assert bounds == sorted(bounds) and bounds[-1] == math.inf
    counts = [n for _, n in hold["buckets"]]
    assert counts == sorted(counts) and counts[-1] == hold["value"]
    assert hold["sum"] > 0
    # Counters have no buckets; no series names a lock.
    assert all(s["buckets"] is None for s in after["redlock_acquisitions_total"])
    assert all("lock" not in s["labels"] for series in after.values() for s in series)


def test_metrics_name_the_failing_node(nodes: list[Node], urls: list[str], key: str) -> None:
    """A frozen minority node: the rounds do not wait for it, but the
    release finished in the background times out there, and is counted."""
    with rf.Redlock.connect(urls, node_timeout=0.2) as redlock:
        before = rf.metrics()
        nodes[4].pause()
        try:
            redlock.acquire(key, 5).release()
            deadline = time.monotonic() + 10
            while True:
                after = rf.metrics()
                timeouts = delta(
                    before, after, "redlock_node_errors_total", node=urls[4], kind="timeout"
                )
                if timeouts >= 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            nodes[4].resume()
    assert timeouts >= 1, after.get("redlock_node_errors_total")
    for url in urls[:4]:
        for kind in ("timeout", "connection", "not_connected"):
            assert delta(before, after, "redlock_node_errors_total", node=url, kind=kind) == 0


def test_prometheus_collector_exposes_the_same_counts(redlock: rf.Redlock, key: str) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    registry = prometheus_client.CollectorRegistry()
    rf.PrometheusCollector.register(registry)
    redlock.acquire(key, 5).release()
    second = redlock.try_acquire(key, 5)
    assert second is not None
    assert second.release()

    # The counts are global to the process: a lock an earlier test dropped
    # is released, and its hold counted, in the background. Compare the
    # collector with a snapshot taken while nothing moved (equal snapshots
    # on both sides of the collector's reads).
    deadline = time.monotonic() + 10
    while True:
        snapshot = rf.metrics()
        granted = registry.get_sample_value(
            "redlock_acquisitions_total", {"outcome": "granted"}
        )
        holds = registry.get_sample_value("redlock_hold_seconds_count", {})
        if rf.metrics() == snapshot or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert granted == count(snapshot, "redlock_acquisitions_total", outcome="granted") > 0
    assert holds == count(snapshot, "redlock_hold_seconds") > 0
    assert registry.get_sample_value("redlock_hold_seconds_bucket", {"le": "+Inf"}) == holds
    text = prometheus_client.generate_latest(registry).decode()
    assert "# TYPE redlock_acquisitions_total counter" in text
    assert "# TYPE redlock_acquire_seconds histogram" in text
