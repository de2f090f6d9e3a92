// What the Scalars tab does to a series before drawing it: smoothing (an exponential moving
// average with debiasing), "ignore outliers in chart scaling", and our automatic log scale.

import uPlot from 'uplot';

import {settings} from './settings';

/** A series spanning more than this many decades is drawn on a log axis in 'auto' mode: on a
 * linear axis everything below 1% of its peak is squeezed into the bottom pixel rows. */
export const AUTO_LOG_DECADES = 2;
/** "Ignore outliers" scales the y axis to these quantiles of the drawn values, as TensorBoard. */
const OUTLIER_QUANTILES: [number, number] = [0.05, 0.95];

/**
 * TensorBoard's smoothing: last = last * w + (1 - w) * y, divided by the debias factor
 * 1 - w^n so the first points are not pulled toward zero. Our series come in buckets of about
 * `pointsPerBucket` consecutive points: a bucket of k points with mean m moves the average as k
 * equal points would, i.e. with weight w^k, so the curve keeps TensorBoard's per-point meaning at
 * any zoom. Non-finite values pass through and constant series stay as they are.
 */
export function smooth(values: (number | null)[], weight: number, pointsPerBucket = 1): (number | null)[] {
  if (!(weight > 0)) return values.slice();
  const first = values.find((v) => v !== null);
  if (values.every((v) => v === null || v === first)) return values.slice();
  const k = Math.max(1, pointsPerBucket);
  const bucketWeight = Math.pow(weight, k);
  let last = 0;
  let accumulated = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return v;
    last = last * bucketWeight + (1 - bucketWeight) * v;
    accumulated += k;
    return last / (1 - Math.pow(weight, accumulated));
  });
}

function positiveExtent(arrays: (number | null)[][]): [number, number] | null {
  let lo = Infinity;
  let hi = -Infinity;
  for (const values of arrays) {
    for (const v of values) {
      if (v !== null && v > 0 && Number.isFinite(v)) {
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
  }
  return hi >= lo ? [lo, hi] : null;
}

/** Log or linear for these values under the current setting. */
export function useLog(arrays: (number | null)[][]): boolean {
  if (settings.yScale !== 'auto') return settings.yScale === 'log';
  const extent = positiveExtent(arrays);
  return extent !== null && Math.log10(extent[1] / extent[0]) > AUTO_LOG_DECADES;
}

function quantile(sorted: number[], q: number): number {
  const position = (sorted.length - 1) * q;
  const below = Math.floor(position);
  const above = Math.min(sorted.length - 1, below + 1);
  return sorted[below] + (sorted[above] - sorted[below]) * (position - below);
}

/** The y range: the 5th-95th percentile of `values()` (the raw values; TensorBoard takes the
 * smoothed ones, where one huge spike decays over many points) when outliers are ignored, else all. */
export function yRange(log: boolean, values: () => (number | null)[][]): uPlot.Range.Function {
  return (_u, dataMin, dataMax) => {
    let [lo, hi] = [dataMin, dataMax];
    if (settings.ignoreOutliers) {
      const finite = values()
        .flat()
        .filter((v): v is number => v !== null && Number.isFinite(v) && (!log || v > 0))
        .sort((a, b) => a - b);
      if (finite.length > 2) [lo, hi] = [quantile(finite, OUTLIER_QUANTILES[0]), quantile(finite, OUTLIER_QUANTILES[1])];
    }
    if (lo === null || hi === null || !Number.isFinite(lo) || !Number.isFinite(hi)) return [log ? 0.1 : 0, 1];
    if (log) return uPlot.rangeLog(Math.max(lo, Number.MIN_VALUE), Math.max(hi, lo), 10, true);
    if (lo === hi) return [lo - Math.abs(lo || 1) * 0.1, hi + Math.abs(hi || 1) * 0.1];
    return uPlot.rangeNum(lo, hi, 0.05, true);
  };
}

const measureCanvas = document.createElement('canvas').getContext('2d');

/** An axis wide enough for its longest tick label (no clipped "1.5e+15"). */
export function axisSize(_u: uPlot, values: string[] | null): number {
  if (!values || !measureCanvas) return 50;
  measureCanvas.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
  const widest = values.reduce((w, v) => Math.max(w, measureCanvas.measureText(v ?? '').width), 0);
  return Math.ceil(widest) + 22; // ticks (10 px), gap (2 px) and a 10 px margin from the edge
}
