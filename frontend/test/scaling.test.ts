import type uPlot from 'uplot';
import {afterEach, describe, expect, it} from 'vitest';

import {axisSize, smooth, useLog, yRange} from '../src/scaling';
import {settings, updateSettings} from '../src/settings';

const defaults = {...settings};
afterEach(() => updateSettings(defaults));

/** TensorBoard's per-point smoothing, written out plainly. */
function tensorboardSmooth(values: number[], weight: number): number[] {
  let last = 0;
  return values.map((v, i) => {
    last = last * weight + (1 - weight) * v;
    return last / (1 - Math.pow(weight, i + 1));
  });
}

describe('smooth', () => {
  it("is TensorBoard's debiased moving average, starting at the first value", () => {
    const values = [1, 2, 4, 3, 5, 8];
    const smoothed = smooth(values, 0.6) as number[];
    expect(smoothed[0]).toBeCloseTo(1, 12);
    smoothed.forEach((v, i) => expect(v).toBeCloseTo(tensorboardSmooth(values, 0.6)[i], 12));
    expect(smooth([1, 2], 0.5)[1]).toBeCloseTo(5 / 3, 12);
  });

  it('weighs a bucket of k points as k equal points', () => {
    // buckets of 3 points with means 2, 5, 1 move the average as 2,2,2,5,5,5,1,1,1 would
    const buckets = smooth([2, 5, 1], 0.8, 3) as number[];
    const points = tensorboardSmooth([2, 2, 2, 5, 5, 5, 1, 1, 1], 0.8);
    expect(buckets[0]).toBeCloseTo(points[2], 12);
    expect(buckets[1]).toBeCloseTo(points[5], 12);
    expect(buckets[2]).toBeCloseTo(points[8], 12);
  });

  it('passes gaps through without disturbing the average', () => {
    const smoothed = smooth([1, null, 3], 0.5);
    expect(smoothed[1]).toBeNull();
    expect(smoothed[2]).toBeCloseTo(smooth([1, 3], 0.5)[1] as number, 12);
  });

  it('leaves raw values and constant series as they are', () => {
    expect(smooth([3, 1, 2], 0)).toEqual([3, 1, 2]);
    expect(smooth([0.25, 0.25, null, 0.25], 0.9)).toEqual([0.25, 0.25, null, 0.25]);
  });
});

describe('useLog', () => {
  it('follows an explicit choice', () => {
    updateSettings({yScale: 'log'});
    expect(useLog([[1, 2]])).toBe(true);
    updateSettings({yScale: 'linear'});
    expect(useLog([[1e-9, 1e9]])).toBe(false);
  });

  it('in auto mode, goes log when the positive values span more than two decades', () => {
    updateSettings({yScale: 'auto'});
    expect(useLog([[1, 50], [150]])).toBe(true);
    expect(useLog([[1, 100]])).toBe(false);
    // zeros, negatives and gaps cannot sit on a log axis and do not count
    expect(useLog([[-1000, 0, null, 2, 3]])).toBe(false);
    expect(useLog([[null, 0]])).toBe(false);
  });
});

describe('yRange', () => {
  const u = {} as uPlot;
  const range = (log: boolean, values: (number | null)[][], lo: number | null, hi: number | null) =>
    (yRange(log, () => values) as (u: uPlot, lo: number | null, hi: number | null, key: string) => uPlot.Range.MinMax)(u, lo, hi, 'y');

  it('pads the data range on a linear axis', () => {
    const [lo, hi] = range(false, [[2, 10]], 2, 10) as [number, number];
    expect(lo).toBeLessThanOrEqual(2);
    expect(hi).toBeGreaterThanOrEqual(10);
    expect(hi - lo).toBeLessThan(8 * 1.5);
  });

  it('widens a flat series by a tenth of its value', () => {
    expect(range(false, [[5, 5]], 5, 5)).toEqual([4.5, 5.5]);
    expect(range(false, [[0]], 0, 0)).toEqual([-0.1, 0.1]);
  });

  it('falls back to a unit range without data', () => {
    expect(range(false, [], null, null)).toEqual([0, 1]);
    expect(range(true, [], null, null)).toEqual([0.1, 1]);
  });

  it('snaps a log range to whole decades', () => {
    const [lo, hi] = range(true, [[0.03, 400]], 0.03, 400) as [number, number];
    expect(lo).toBeCloseTo(0.01, 12);
    expect(hi).toBeCloseTo(1000, 9);
  });

  it('with outliers ignored, scales to the 5th-95th percentile of the values', () => {
    const values = Array.from({length: 101}, (_, i) => 1000 + i); // quantiles 1005 and 1095
    values[50] = 1e6; // one spike
    updateSettings({ignoreOutliers: false});
    expect((range(false, [values], 1000, 1e6) as number[])[1]).toBeGreaterThanOrEqual(1e6);
    updateSettings({ignoreOutliers: true});
    const [lo, hi] = range(false, [values], 1000, 1e6) as [number, number];
    expect(lo).toBeLessThanOrEqual(1005);
    expect(lo).toBeGreaterThan(990);
    expect(hi).toBeGreaterThanOrEqual(1095);
    expect(hi).toBeLessThan(1110);
  });
});

describe('axisSize', () => {
  it('has a default width without labels', () => {
    expect(axisSize({} as uPlot, null)).toBe(50);
  });
});
