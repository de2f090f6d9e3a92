// The x axis as the Scalars tab offers it: step, relative (time since the run's first point) or
// wall time. Zoom ranges, finding markers and server requests stay in steps; a Timeline maps a
// run's steps to seconds by linear interpolation between the logged points' wall times.

import {formatStep, formatNumber} from './format';
import {lang} from './i18n';
import {settings, type XAxis} from './settings';

export class Timeline {
  private readonly steps: number[];
  private readonly times: number[];

  /** `walls` are wall times (s) at `steps`; a clock that went backwards (a restart) is held flat. */
  constructor(steps: number[], walls: number[], readonly firstWall: number) {
    this.steps = [];
    this.times = [];
    let latest = -Infinity;
    for (let i = 0; i < steps.length; i++) {
      if (this.steps.length && steps[i] <= this.steps[this.steps.length - 1]) continue;
      latest = Math.max(latest, walls[i]);
      this.steps.push(steps[i]);
      this.times.push(latest);
    }
  }

  get empty(): boolean {
    return this.steps.length === 0;
  }

  private static interpolate(xs: number[], ys: number[], x: number): number {
    const n = xs.length;
    if (n === 1) return ys[0];
    let i = 0;
    let j = n - 1;
    if (x <= xs[0]) [i, j] = [0, 1];
    else if (x >= xs[n - 1]) [i, j] = [n - 2, n - 1];
    else {
      while (j - i > 1) {
        const mid = (i + j) >> 1;
        if (xs[mid] <= x) i = mid;
        else j = mid;
      }
    }
    const span = xs[j] - xs[i];
    return span > 0 ? ys[i] + ((ys[j] - ys[i]) * (x - xs[i])) / span : ys[i];
  }

  /** Seconds (wall, or since the first point) at `step`. */
  toX(step: number, mode: XAxis): number {
    const wall = Timeline.interpolate(this.steps, this.times, step);
    return mode === 'relative' ? wall - this.firstWall : wall;
  }

  toStep(x: number, mode: XAxis): number {
    const wall = mode === 'relative' ? x + this.firstWall : x;
    return Timeline.interpolate(this.times, this.steps, wall);
  }
}

const UNITS = {en: ['s', 'min', 'h', 'd'], zh: ['秒', '分钟', '小时', '天']};

/** "1.5 h", "12 min", "40 s" (in Chinese 小时, 分钟, 秒): a relative time. */
export function formatDuration(seconds: number): string {
  const [sec, min, hour, day] = UNITS[lang()];
  const s = Math.abs(seconds);
  if (s < 120) return `${formatNumber(Number(seconds.toFixed(1)))} ${sec}`;
  if (s < 7200) return `${formatNumber(Number((seconds / 60).toFixed(1)))} ${min}`;
  if (s < 172800) return `${formatNumber(Number((seconds / 3600).toFixed(2)))} ${hour}`;
  return `${formatNumber(Number((seconds / 86400).toFixed(2)))} ${day}`;
}

function pad(n: number): string {
  return String(n).padStart(2, '0');
}

/** Local clock time, with the date when the shown span crosses days. */
export function formatWall(seconds: number, withDate: boolean): string {
  const d = new Date(seconds * 1000);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  return withDate ? `${d.getMonth() + 1}/${d.getDate()} ${time}` : `${time}:${pad(d.getSeconds())}`;
}

/** One x value (step or seconds) as the current axis mode shows it. */
export function formatX(value: number | null, mode: XAxis = settings.xAxis, span = 0): string {
  if (value === null || value === undefined) return '';
  if (mode === 'step') return Math.abs(value) >= 1e4 ? `${formatNumber(value / 1000)}k` : formatStep(value);
  if (mode === 'relative') return formatDuration(value);
  return formatWall(value, span > 86400);
}
