// A scalar series drawn as a min/max envelope with its mean, from the server's downsampled
// buckets (uPlot), optionally with a window-maximum series above it. Finding markers and
// non-finite points are drawn on top.

import uPlot from 'uplot';

import {api, HttpError, isAbort, type Range, type SeriesResponse} from './api';
import {chartCard, type Card} from './card';
import type {ChartGroup, GroupMember} from './chartGroup';
import {SEVERITY_COLORS} from './colors';
import {el} from './dom';
import {bindText, t} from './i18n';
import {groupPlotOptions, legendValue, plotWidth, xLabel} from './plotOptions';
import {smooth, useLog} from './scaling';
import {settings} from './settings';
import {timeSeriesUrl} from './tbLinks';
import {setTip} from './tooltip';

export interface Marker {
  step: number;
  endStep?: number;
  severity: string;
  active: boolean;
}

export interface EnvelopeOptions {
  id: string;
  titleKey: string;
  run: string;
  tag: string;
  log?: boolean;
  height?: number;
  wide?: boolean;
  color?: string;
  markers?: () => Marker[];
  /** A series of window maxima (our hooks' `train/loss_max`): every step's worst value between
   * two logged points, drawn dashed over the envelope so a one-step spike shows on the chart. */
  peakTag?: string;
  /** Other runs' series of the same signal (a job's other ranks), drawn as thin lines. */
  overlays?: {run: string; tag: string; color: string}[];
}

const NONFINITE_COLOR = '#d93025';
const WINDOW_MAX_COLOR = '#e8710a';

/** Values at or below zero cannot sit on a log axis. */
function positiveOnly(values: (number | null)[]): (number | null)[] {
  return values.map((v) => (v !== null && v > 0 ? v : null));
}

export class EnvelopeChart implements GroupMember {
  readonly card: Card;
  ready = false;
  private plot: uPlot | null = null;
  private plotLog: boolean | null = null;
  private inflight: AbortController | null = null;
  private nonfinite: number[] = [];
  private last: {data: SeriesResponse; peak: SeriesResponse | null; others: (SeriesResponse | null)[]} | null = null;
  private drawn: (number | null)[][] = [];
  /** A fetch is under way: a redraw of the old data (a zoom applied at once) is not "ready". */
  private fetching = false;
  private readonly resize: ResizeObserver;
  private readonly scaleLabel = el('span', {class: 'scale-label'});

  constructor(
    private readonly options: EnvelopeOptions,
    private readonly group: ChartGroup,
  ) {
    this.card = chartCard(options.id, options.titleKey, options.tag, options.wide);
    const link = el('a', {class: 'tb-link', text: '↗', attrs: {href: timeSeriesUrl(options.run, options.tag), target: '_top'}});
    this.card.root.querySelector('header')?.append(this.scaleLabel, setTip(link, t('openTimeSeries')));
    this.resize = new ResizeObserver(() => {
      if (this.plot) this.plot.setSize({width: this.card.body.clientWidth, height: this.height()});
    });
    this.resize.observe(this.card.body);
    group.add(this);
  }

  private height(): number {
    return this.options.height ?? 170;
  }

  applyRange(range: Range): void {
    this.plot?.setScale('x', {min: range.start, max: range.end});
  }

  /** Legend labels in the current language. */
  relabel(): void {
    const labels = [xLabel(), t('mean'), t('min'), t('max'), t('smoothed'), t('windowMax')];
    this.plot?.root.querySelectorAll('.u-legend .u-series .u-label').forEach((node, i) => {
      if (labels[i]) node.textContent = labels[i];
    });
  }

  redraw(): void {
    this.plot?.redraw(false, true);
  }

  /** A new scale, smoothing or axis: the same data, built again. */
  rebuild(): void {
    this.plot?.destroy();
    this.plot = null;
    if (this.last) this.show(this.last.data, this.last.peak, this.last.others);
  }

  async reload(): Promise<void> {
    this.inflight?.abort();
    const controller = new AbortController();
    this.inflight = controller;
    this.ready = false;
    this.fetching = true;
    this.card.root.dataset.state = 'loading';
    try {
      const width = plotWidth(this.card.body);
      const zoom = this.group.requestRange();
      const [data, peak, ...others] = await Promise.all([
        api.series(this.options.run, this.options.tag, width, zoom, controller.signal),
        this.options.peakTag ? this.optionalSeries(this.options.run, this.options.peakTag, width, zoom, controller.signal) : null,
        ...(this.options.overlays ?? []).map((o) => this.optionalSeries(o.run, o.tag, width, zoom, controller.signal)),
      ]);
      if (controller.signal.aborted) return;
      this.fetching = false;
      this.show(data as SeriesResponse, peak, others);
    } catch (error) {
      if (isAbort(error)) return;
      this.fetching = false;
      this.plot?.destroy();
      this.plot = null;
      const missing = error instanceof HttpError && error.status === 404;
      this.card.setState(missing ? 'empty' : 'error', missing ? 'notLogged' : 'loadFailed', {error: String((error as Error).message)});
      this.ready = true;
      this.group.memberReady();
    }
  }

  /** The window maxima, or none when they cannot be had: the chart still shows the series. */
  private async optionalSeries(run: string, tag: string, width: number, zoom: Range | null, signal: AbortSignal): Promise<SeriesResponse | null> {
    try {
      return await api.series(run, tag, width, zoom, signal);
    } catch (error) {
      if (isAbort(error)) throw error;
      return null;
    }
  }

  private show(data: SeriesResponse, peak: SeriesResponse | null = null, others: (SeriesResponse | null)[] = []): void {
    this.last = {data, peak, others};
    // a plan's log (gradient norms, loss scale) is its default; an explicit choice wins
    const log = settings.yScale === 'auto' && this.options.log !== undefined ? this.options.log : useLog([data.min, data.max, peak?.max ?? []]);
    bindText(this.scaleLabel, log ? 'scaleLog' : 'scaleLinear');
    const fix = log ? positiveOnly : (values: (number | null)[]) => values;
    const perBucket = data.steps.length ? data.total_points / data.steps.length : 1;
    const smoothed = smooth(data.mean, settings.smoothing, perBucket);
    let table: uPlot.AlignedData = [data.steps, fix(data.mean), fix(data.min), fix(data.max), fix(smoothed)];
    if (this.options.peakTag) {
      // both series on one step axis; a step logged in only one of them is not a gap in the other
      const peaks: uPlot.AlignedData = peak ? [peak.steps, fix(peak.max)] : [[], []];
      table = uPlot.join([table, peaks]);
    }
    if (this.options.overlays?.length) {
      const perBucket = (r: SeriesResponse) => (r.steps.length ? r.total_points / r.steps.length : 1);
      const lines = others.map((r) => (r ? ([r.steps, fix(smooth(r.mean, settings.smoothing, perBucket(r)))] as uPlot.AlignedData) : ([[], []] as uPlot.AlignedData)));
      table = uPlot.join([table, ...lines]);
    }
    this.card.root.dataset.overlays = String(others.filter((r) => r && r.steps.length).length);
    const xs = (table[0] as number[]).map((s) => this.group.toX(s));
    table = [xs, ...table.slice(1)] as uPlot.AlignedData;
    // outliers are judged on the raw values: a smoothed spike decays over many points and
    // would itself pass for the ordinary range
    this.drawn = [table[1]] as (number | null)[][];
    this.nonfinite = [...data.nonfinite, ...(peak?.nonfinite ?? [])].map((p) => p.step);
    const root = this.card.root;
    root.dataset.points = String(data.total_points);
    root.dataset.buckets = String(data.steps.length);
    root.dataset.scale = log ? 'log' : 'linear';
    root.dataset.smoothing = String(settings.smoothing);
    const highest = [...data.max, ...(peak?.max ?? [])].reduce<number | null>((a, v) => (v !== null && (a === null || v > a) ? v : a), null);
    root.dataset.max = highest === null ? '' : String(highest);
    const hiddenOnLog = log ? data.min.filter((v) => v !== null && v <= 0).length : 0;
    if (data.steps.length === 0 && data.nonfinite.length === 0) {
      this.card.setState('empty', 'noData');
    } else if (hiddenOnLog) {
      this.card.setState('loading', 'notOnLogScale', {n: hiddenOnLog});
    } else {
      this.card.setState('loading');
    }
    if (this.plot && this.plotLog !== log) {
      this.plot.destroy();
      this.plot = null;
    }
    if (!this.plot) {
      this.plotLog = log;
      this.plot = new uPlot(this.plotOptions(log), table, this.card.body);
    } else {
      this.plot.setData(table, true);
    }
  }

  private plotOptions(log: boolean): uPlot.Options {
    const color = this.options.color ?? '#1a73e8';
    const smoothing = settings.smoothing > 0;
    const value = legendValue;
    return groupPlotOptions({
      group: this.group,
      root: this.card.root,
      body: this.card.body,
      height: this.height(),
      y: {log, values: () => this.drawn},
      series: [
        // the raw series stays faint behind its smoothed line, as in the Scalars tab
        {label: t('mean'), stroke: smoothing ? `${color}55` : color, width: smoothing ? 1 : 1.5, value},
        {label: t('min'), stroke: `${color}40`, width: 1, value},
        {label: t('max'), stroke: `${color}40`, width: 1, value},
        {label: t('smoothed'), stroke: color, width: 1.8, show: smoothing, value},
        ...(this.options.peakTag ? [{label: t('windowMax'), stroke: WINDOW_MAX_COLOR, width: 1, dash: [4, 3], value}] : []),
        ...(this.options.overlays ?? []).map((o) => ({label: o.run, stroke: o.color, width: 1, spanGaps: true, value})),
      ],
      bands: [{series: [3, 2], fill: `${color}1c`}],
      draw: (u) => this.afterDraw(u),
    });
  }

  private afterDraw(u: uPlot): void {
    drawMarkers(u, this.options.markers?.() ?? [], this.group);
    drawNonfinite(u, this.nonfinite, this.group);
    if (this.fetching) return;
    if (this.card.root.dataset.state === 'loading') this.card.root.dataset.state = 'ready';
    if (!this.ready) {
      this.ready = true;
      this.group.memberReady();
    }
  }

  destroy(): void {
    this.inflight?.abort();
    this.resize.disconnect();
    this.plot?.destroy();
    this.plot = null;
  }
}

/** Vertical lines (or shaded spans) at finding steps, coloured by severity. */
export function drawMarkers(u: uPlot, markers: Marker[], group: ChartGroup): void {
  if (!markers.length) return;
  const {ctx, bbox} = u;
  ctx.save();
  ctx.beginPath();
  ctx.rect(bbox.left, bbox.top, bbox.width, bbox.height);
  ctx.clip();
  for (const marker of markers) {
    const color = SEVERITY_COLORS[marker.severity] ?? SEVERITY_COLORS.info;
    const x0 = u.valToPos(group.toX(marker.step), 'x', true);
    if (marker.active && marker.endStep !== undefined && marker.endStep > marker.step) {
      const x1 = u.valToPos(group.toX(marker.endStep), 'x', true);
      ctx.fillStyle = `${color}30`;
      ctx.fillRect(x0, bbox.top, Math.max(1, x1 - x0), bbox.height);
    }
    ctx.strokeStyle = color;
    ctx.lineWidth = (marker.active ? 2.5 : 1.2) * devicePixelRatio;
    ctx.setLineDash(marker.active ? [] : [4 * devicePixelRatio, 3 * devicePixelRatio]);
    ctx.beginPath();
    ctx.moveTo(x0, bbox.top);
    ctx.lineTo(x0, bbox.top + bbox.height);
    ctx.stroke();
  }
  ctx.restore();
}

/** Small red triangles along the top edge at steps whose value was NaN or Inf. */
export function drawNonfinite(u: uPlot, steps: number[], group: ChartGroup): void {
  if (!steps.length) return;
  const {ctx, bbox} = u;
  const size = 5 * devicePixelRatio;
  ctx.save();
  ctx.fillStyle = NONFINITE_COLOR;
  for (const step of steps) {
    const x = u.valToPos(group.toX(step), 'x', true);
    if (x < bbox.left - 1 || x > bbox.left + bbox.width + 1) continue;
    ctx.beginPath();
    ctx.moveTo(x - size, bbox.top);
    ctx.lineTo(x + size, bbox.top);
    ctx.lineTo(x, bbox.top + size * 1.6);
    ctx.closePath();
    ctx.fill();
  }
  ctx.restore();
}
