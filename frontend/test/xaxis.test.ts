import type uPlot from 'uplot';
import {afterEach, describe, expect, it} from 'vitest';

import {setLang} from '../src/i18n';
import {stepAxisValues, xLegendValue} from '../src/plotOptions';
import {settings, updateSettings} from '../src/settings';
import {formatDuration, formatWall, formatX, Timeline} from '../src/xaxis';

const defaults = {...settings};
afterEach(() => {
  updateSettings(defaults);
  setLang('en');
});

/** Epoch seconds of a local clock time (the formatters show local time). */
function local(month: number, day: number, h: number, m: number, s: number): number {
  return new Date(2026, month - 1, day, h, m, s).getTime() / 1000;
}

describe('Timeline', () => {
  const timeline = new Timeline([0, 10, 20], [100, 110, 130], 100);

  it('maps steps to wall and relative seconds, interpolating between logged points', () => {
    expect(timeline.toX(5, 'wall')).toBe(105);
    expect(timeline.toX(15, 'wall')).toBe(120);
    expect(timeline.toX(15, 'relative')).toBe(20);
    expect(timeline.toX(30, 'wall')).toBe(150); // extrapolated along the last segment
  });

  it('maps seconds back to steps', () => {
    expect(timeline.toStep(120, 'wall')).toBe(15);
    expect(timeline.toStep(20, 'relative')).toBe(15);
    for (const step of [0, 3, 12, 20]) expect(timeline.toStep(timeline.toX(step, 'wall'), 'wall')).toBeCloseTo(step, 9);
  });

  it('holds a clock that went backwards (a restart) flat and keeps the first of repeated steps', () => {
    const restarted = new Timeline([0, 1, 1, 2, 3], [100, 110, 500, 90, 120], 100);
    expect(restarted.toX(1, 'wall')).toBe(110);
    expect(restarted.toX(2, 'wall')).toBe(110);
    expect(restarted.toX(3, 'wall')).toBe(120);
  });

  it('handles one point and none', () => {
    const one = new Timeline([7], [50], 50);
    expect(one.toX(100, 'relative')).toBe(0);
    expect(one.empty).toBe(false);
    expect(new Timeline([], [], 0).empty).toBe(true);
  });
});

describe('formatDuration', () => {
  it('picks seconds, minutes, hours or days', () => {
    expect(formatDuration(45)).toBe('45 s');
    expect(formatDuration(119)).toBe('119 s');
    expect(formatDuration(150)).toBe('2.5 min');
    expect(formatDuration(5400)).toBe('90 min');
    expect(formatDuration(7200)).toBe('2 h');
    expect(formatDuration(200000)).toBe('2.31 d');
    expect(formatDuration(-30)).toBe('-30 s');
  });

  it('speaks Chinese units in Chinese', () => {
    setLang('zh');
    expect(formatDuration(150)).toBe('2.5 分钟');
    expect(formatDuration(7200)).toBe('2 小时');
  });
});

describe('formatWall and formatX', () => {
  it('shows clock time, with the date when the span crosses days', () => {
    const t = local(1, 2, 3, 4, 5);
    expect(formatWall(t, false)).toBe('03:04:05');
    expect(formatWall(t, true)).toBe('1/2 03:04');
    expect(formatX(t, 'wall', 3600)).toBe('03:04:05');
    expect(formatX(t, 'wall', 2 * 86400)).toBe('1/2 03:04');
  });

  it('abbreviates large steps in thousands', () => {
    expect(formatX(999, 'step')).toBe('999');
    expect(formatX(9999, 'step')).toBe('9,999');
    expect(formatX(25000, 'step')).toBe('25k');
    expect(formatX(1_250_000, 'step')).toBe('1250k');
    expect(formatX(null, 'step')).toBe('');
    expect(formatX(90, 'relative')).toBe('90 s');
  });
});

describe('chart x axis', () => {
  const u = (min: number, max: number) => ({scales: {x: {min, max}}}) as unknown as uPlot;

  it('labels ticks in the chosen mode', () => {
    updateSettings({xAxis: 'step'});
    expect(stepAxisValues(u(0, 50000), [0, 20000, null])).toEqual(['0', '20k', '']);
    updateSettings({xAxis: 'relative'});
    expect(stepAxisValues(u(0, 600), [0, 300])).toEqual(['0 s', '5 min']);
    updateSettings({xAxis: 'wall'});
    const t = local(3, 4, 10, 20, 30);
    expect(stepAxisValues(u(t, t + 600), [t])).toEqual(['10:20:30']);
    expect(stepAxisValues(u(t, t + 3 * 86400), [t])).toEqual(['3/4 10:20']);
  });

  it('shows the legend x as a full step, a duration or a clock time', () => {
    updateSettings({xAxis: 'step'});
    expect(xLegendValue(u(0, 1), 123456)).toBe('123,456');
    expect(xLegendValue(u(0, 1), null)).toBe('—');
    updateSettings({xAxis: 'relative'});
    expect(xLegendValue(u(0, 1), 7200)).toBe('2 h');
  });
});
