/**
 * The client's metrics, as the addon keeps them in memory: the Rust client
 * records them through the `metrics` facade (names and meaning in
 * docs/metrics.md) and the addon installs a recorder that keeps every
 * counter and a bucketed summary of every histogram. Lock names are never
 * labels.
 */

import { native } from "./native.js";

/** One series of a metric: its labels and its value. */
export interface MetricSeries {
  /** The labels, e.g. `{ outcome: "granted" }`. */
  labels: Record<string, string>;
  /** A counter's total; a histogram's number of samples. */
  value: number;
  /** A histogram's sum of samples (seconds); `null` for a counter. */
  sum: number | null;
  /**
   * A histogram's cumulative counts per upper bound (seconds), the last one
   * `[Infinity, value]`; `null` for a counter.
   */
  buckets: Array<[number, number]> | null;
}

/**
 * Every metric the client recorded in this process so far, by name
 * (`redlock_acquisitions_total`, `redlock_acquire_seconds`, …). Metrics with
 * nothing recorded yet are absent. Counts only grow: take differences
 * between two calls for what happened in between.
 */
export function metrics(): Record<string, MetricSeries[]> {
  const out: Record<string, MetricSeries[]> = {};
  for (const s of native.metrics()) {
    const series: MetricSeries = {
      labels: { ...s.labels },
      value: s.value,
      sum: s.sum ?? null,
      buckets: s.buckets
        ? [...s.buckets.map((b): [number, number] => [b.le, b.count]), [Infinity, s.value]]
        : null,
    };
    (out[s.name] ??= []).push(series);
  }
  return out;
}
