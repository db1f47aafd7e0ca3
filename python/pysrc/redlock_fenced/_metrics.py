"""The client's metrics, as the extension keeps them in memory.

The Rust client records them through the `metrics` facade (the names and
their meaning: `redlock_client::metrics`, docs/metrics.md); the extension
installs a recorder that keeps every counter and a bucketed summary of every
histogram. `metrics()` reads them; `PrometheusCollector` hands them to
`prometheus_client` when it is installed. Lock names are never labels.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, TypedDict

from . import _native


class MetricSeries(TypedDict):
    """One series of a metric: its labels and its value."""

    labels: dict[str, str]
    """The labels, e.g. {"outcome": "granted"}."""
    value: int
    """A counter's total; a histogram's number of samples."""
    sum: float | None
    """A histogram's sum of samples (seconds); None for a counter."""
    buckets: list[tuple[float, int]] | None
    """A histogram's cumulative counts per upper bound (seconds), the last
    one `(math.inf, value)`; None for a counter."""


_HELP = {
    "redlock_acquisitions_total": "Acquisition attempts by outcome, and waiting acquisitions that timed out",
    "redlock_acquire_seconds": "Duration of one acquisition attempt (a quorum round)",
    "redlock_wait_seconds": "Time from an acquire call to the start of the attempt that got the lock",
    "redlock_hold_seconds": "How long a lock was held, acquisition to release",
    "redlock_extensions_total": "Lock extensions by outcome (ok, failed)",
    "redlock_locks_lost_total": "Locks found lost while held",
    "redlock_node_errors_total": "Failed or missing node replies in quorum rounds, by node and kind",
    "redlock_write_backs_total": "Acquisitions that wrote the highest token back to other nodes",
    "redlock_stale_refusals_total": "Fenced calls refused as stale by the resource's guard",
}


def metrics() -> dict[str, list[MetricSeries]]:
    """Every metric the client recorded in this process so far, by name
    (`redlock_acquisitions_total`, `redlock_acquire_seconds`, …): a list of
    series, each with its labels and value. Metrics with nothing recorded
    yet are absent. Counts only grow; take differences between two calls
    for what happened in between."""
    out: dict[str, list[MetricSeries]] = {}
    for name, labels, counter, histogram in _native.metrics():
        if histogram is not None:
            count, total, buckets = histogram
            series = MetricSeries(
                labels=dict(labels),
                value=count,
                sum=total,
                buckets=[*buckets, (math.inf, count)],
            )
        else:
            series = MetricSeries(labels=dict(labels), value=counter or 0, sum=None, buckets=None)
        out.setdefault(name, []).append(series)
    return out


class PrometheusCollector:
    """A `prometheus_client` collector of `metrics()`: counters as counters,
    histograms as histograms (seconds). Needs `prometheus_client`
    (imported when collecting); register it once:

        from prometheus_client import start_http_server
        redlock_fenced.PrometheusCollector.register()
        start_http_server(9464)
    """

    @classmethod
    def register(cls, registry: Any = None) -> PrometheusCollector:
        """Registers a collector with `registry` (default:
        `prometheus_client.REGISTRY`) and returns it."""
        if registry is None:
            from prometheus_client import REGISTRY

            registry = REGISTRY
        collector = cls()
        registry.register(collector)
        return collector

    def collect(self) -> Iterator[Any]:
        """The metric families, as `prometheus_client` asks for them."""
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        for name, all_series in sorted(metrics().items()):
            label_names = sorted(all_series[0]["labels"])
            help_text = _HELP.get(name, name)
            family: Any
            if all_series[0]["buckets"] is None:
                family = CounterMetricFamily(name, help_text, labels=label_names)
                for series in all_series:
                    values = [series["labels"].get(k, "") for k in label_names]
                    family.add_metric(values, series["value"])
            else:
                family = HistogramMetricFamily(name, help_text, labels=label_names, unit="seconds")
                for series in all_series:
                    values = [series["labels"].get(k, "") for k in label_names]
                    buckets = [
                        ("+Inf" if math.isinf(bound) else repr(bound), count)
                        for bound, count in series["buckets"] or []
                    ]
                    family.add_metric(values, buckets, series["sum"] or 0.0)
            yield family
