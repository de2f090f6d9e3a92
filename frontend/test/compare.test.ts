import {afterEach, describe, expect, it} from 'vitest';

import type {RunSummary, SeriesResponse} from '../src/api';
import {bestRun, lastFinite, minFinite, runSeries, runXs} from '../src/compare';
import {settings, updateSettings} from '../src/settings';

const defaults = {...settings};
afterEach(() => updateSettings(defaults));

function run(name: string, status: RunSummary['status'] = 'healthy'): RunSummary {
  return {
    run: name,
    job: null,
    status,
    counts: {info: 0, warning: 0, critical: 0},
    worst: null,
    kinds: [],
    steps: {first: 0, last: 100},
    last_update: null,
    signals: {loss: 'train/loss'},
  };
}

function series(steps: number[], walls?: number[], first?: number): SeriesResponse {
  const none = steps.map(() => null);
  return {run: 'r', tag: 'train/loss', total_points: steps.length, downsampled: false, steps, min: none, max: none, mean: none, nonfinite: [], wall_times: walls, first_wall_time: first};
}

describe('bestRun', () => {
  it('is the lowest final loss among runs without critical findings', () => {
    const runs = [run('a'), run('b', 'critical'), run('c', 'warning'), run('d')];
    const stats = new Map([
      ['a', {final: 2.0, best: 1.5}],
      ['b', {final: 0.1, best: 0.1}], // lowest, but critical
      ['c', {final: 1.2, best: 1.0}],
      ['d', {final: null, best: null}], // no loss yet
    ]);
    expect(bestRun(runs, stats)).toBe('c');
  });

  it('is none when no run qualifies', () => {
    expect(bestRun([run('a', 'critical'), run('b')], new Map([['a', {final: 1, best: 1}]]))).toBeNull();
    expect(bestRun([], new Map())).toBeNull();
  });
});

describe('loss figures', () => {
  it('take the last finite mean and the lowest minimum', () => {
    expect(lastFinite([3, 2, null])).toBe(2);
    expect(lastFinite([3, Infinity])).toBe(3);
    expect(lastFinite([null])).toBeNull();
    expect(minFinite([null, 4, 1.5, 2])).toBe(1.5);
    expect(minFinite([])).toBeNull();
  });
});

describe('runXs', () => {
  it('is the steps on a step axis', () => {
    updateSettings({xAxis: 'step'});
    expect(runXs(series([0, 10, 20], [100, 110, 120], 100))).toEqual([0, 10, 20]);
  });

  it("is each run's own clock on a time axis, held flat where it went backwards", () => {
    updateSettings({xAxis: 'relative'});
    expect(runXs(series([0, 10, 20, 30], [100, 110, 105, 130], 95))).toEqual([5, 15, 15, 35]);
    expect(runXs(series([0, 10], [100, 110]))).toEqual([0, 10]); // its first point as origin
    updateSettings({xAxis: 'wall'});
    expect(runXs(series([0, 10], [100, 110], 95))).toEqual([100, 110]);
  });

  it('falls back to steps when the server sent no wall times', () => {
    updateSettings({xAxis: 'wall'});
    expect(runXs(series([0, 10]))).toEqual([0, 10]);
  });
});

describe('runSeries', () => {
  it('gives each run a smoothed line, a raw mean and a min/max band in its colour', () => {
    const {series: lines, bands} = runSeries(
      [
        {name: 'a', color: '#112233'},
        {name: 'b', color: '#445566'},
      ],
      true,
    );
    expect(lines.map((s) => s.label)).toEqual(['a', 'a mean', 'a min', 'a max', 'b', 'b mean', 'b min', 'b max']);
    expect(lines[0].stroke).toBe('#112233');
    expect(lines[5].stroke).toBe('#44556650');
    // uPlot counts x as series 0: run a's max and min are series 4 and 3, run b's 8 and 7
    expect(bands.map((b) => b.series)).toEqual([
      [4, 3],
      [8, 7],
    ]);
    expect(bands[1].fill).toBe('#44556614');
  });

  it('hides the raw mean when nothing is smoothed', () => {
    expect(runSeries([{name: 'a', color: '#000000'}], false).series[1].show).toBe(false);
  });
});
