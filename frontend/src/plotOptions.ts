// The one uPlot configuration every chart of the tab starts from (the run view's envelopes, the
// per-layer heatmap, the compare chart): the group's shared x axis (step, relative or wall time,
// its zoom range, synced cursor, drag-to-zoom and double-click reset), axes in the theme's
// colours, the drawn ranges mirrored on the card for tests, and a y scale that is log or linear
// with the "ignore outliers" range. Each chart adds only its series and its drawing.

import uPlot from 'uplot';

import type {ChartGroup} from './chartGroup';
import {formatNumber, formatStep} from './format';
import {t} from './i18n';
import {axisSize, yRange} from './scaling';
import {settings} from './settings';
import {cssColor} from './theme';
import {formatX} from './xaxis';

/** The x axis label of the current mode. */
export function xLabel(): string {
  return t(settings.xAxis === 'step' ? 'step' : settings.xAxis === 'relative' ? 'xRelative' : 'xWall');
}

// uPlot passes null for ticks it leaves unlabelled (log axes), so both formatters accept it.
export function stepAxisValues(u: uPlot, splits: (number | null)[]): string[] {
  const span = (u.scales.x?.max ?? 0) - (u.scales.x?.min ?? 0);
  return splits.map((v) => formatX(v, settings.xAxis, span));
}

export function valueAxisValues(_u: uPlot, splits: (number | null)[]): string[] {
  return splits.map((v) => (v === null ? '' : formatTick(v)));
}

/** Axis ticks: short, with exponents trimmed (`5e-4`, not `5.00e-4`). */
export function formatTick(value: number): string {
  const magnitude = Math.abs(value);
  if (magnitude !== 0 && (magnitude >= 1e5 || magnitude < 1e-3)) return Number(value.toExponential(2)).toExponential();
  return Number(value.toPrecision(4)).toString();
}

const axisStroke = () => cssColor('--chart-text');
const gridLines = () => ({stroke: () => cssColor('--chart-grid'), width: 1});

/** The x axis in the chosen mode (uPlot's own time ticks on the wall-time axis). */
export function xAxis(): uPlot.Axis {
  return {values: settings.xAxis === 'wall' ? undefined : stepAxisValues, size: 30, gap: 2, stroke: axisStroke, grid: gridLines(), ticks: gridLines()};
}

/** A value axis as wide as its longest label. */
export function valueAxis(): uPlot.Axis {
  return {values: valueAxisValues, size: axisSize, gap: 2, stroke: axisStroke, grid: gridLines(), ticks: gridLines()};
}

/** The legend's x value: a step, a duration or a clock time. */
export function xLegendValue(_u: uPlot, v: number | null): string {
  if (v === null || v === undefined) return '—';
  return settings.xAxis === 'step' ? formatStep(v) : formatX(v, settings.xAxis, 0);
}

/** A legend value. */
export function legendValue(_u: uPlot, v: number | null): string {
  return formatNumber(v);
}

/** Pixel width of a chart body, the number of buckets worth requesting. */
export function plotWidth(body: HTMLElement): number {
  return Math.max(100, Math.min(4000, Math.round(body.clientWidth || 600)));
}

/** Drag-to-zoom and double-click-to-reset wired to the group instead of one chart. */
export function groupCursor(group: ChartGroup): uPlot.Cursor {
  return {
    sync: {key: group.syncKey, setSeries: false},
    drag: {x: true, y: false, setScale: false},
    bind: {dblclick: () => () => null},
  } as uPlot.Cursor;
}

/** A drag zooms the group, a double click resets it; the drawn ranges go to `root`'s data-*. */
export function groupHooks(group: ChartGroup, root: HTMLElement): Partial<uPlot.Hooks.Arrays> {
  return {
    setSelect: [
      (u: uPlot) => {
        if (u.select.width > 4) {
          const start = u.posToVal(u.select.left, 'x');
          const end = u.posToVal(u.select.left + u.select.width, 'x');
          u.setSelect({left: 0, top: 0, width: 0, height: 0}, false);
          group.zoomToX({start, end});
        }
      },
    ],
    ready: [(u: uPlot) => u.over.addEventListener('dblclick', () => group.zoomTo(null))],
    setScale: [
      (u: uPlot, key: string) => {
        // the drawn ranges, for tests and for anyone inspecting the page
        if (key === 'y') {
          root.dataset.ymin = String(u.scales.y.min ?? '');
          root.dataset.ymax = String(u.scales.y.max ?? '');
        }
        if (key !== 'x') return;
        root.dataset.xmin = String(Math.round(u.scales.x.min ?? 0));
        root.dataset.xmax = String(Math.round(u.scales.x.max ?? 0));
      },
    ],
  };
}

/** The group's visible range, else the data's (widened when it is a single point). */
export function xRange(group: ChartGroup): uPlot.Range.Function {
  return (_u, dataMin, dataMax) => {
    const shown = group.visibleX();
    if (shown) return [shown.start, shown.end];
    if (dataMin === null || dataMax === null) return [0, 1];
    return dataMin === dataMax ? [dataMin - 1, dataMax + 1] : [dataMin, dataMax];
  };
}

export interface GroupPlotSpec {
  group: ChartGroup;
  /** The card: its data-x/ymin/max mirror the drawn ranges. */
  root: HTMLElement;
  /** Where the chart goes: its width is the plot's. */
  body: HTMLElement;
  height: number;
  /** The series after x's. */
  series: uPlot.Series[];
  /** A value scale `y`, log or linear, whose "ignore outliers" range is taken over `values()`. */
  y?: {log: boolean; values: () => (number | null)[][]};
  /** Instead of `y`: other scales and the axis drawn on the left. */
  scales?: uPlot.Scales;
  yAxis?: uPlot.Axis;
  bands?: uPlot.Band[];
  legend?: boolean;
  /** Cursor points on the series (uPlot's default); a heatmap has no line to put them on. */
  cursorPoints?: boolean;
  /** Drawn after uPlot's own drawing (markers, cells, readiness). */
  draw: (u: uPlot) => void;
  /** More hooks (cursor moves...). */
  hooks?: Partial<uPlot.Hooks.Arrays>;
}

/** The options of a chart that belongs to `group`. */
export function groupPlotOptions(spec: GroupPlotSpec): uPlot.Options {
  const {group, y} = spec;
  const scales: uPlot.Scales = {x: {time: settings.xAxis === 'wall', range: xRange(group)}};
  if (y) scales.y = {distr: y.log ? 3 : 1, range: yRange(y.log, y.values)};
  Object.assign(scales, spec.scales);
  const cursor = groupCursor(group);
  if (spec.cursorPoints === false) cursor.points = {show: false};
  return {
    width: spec.body.clientWidth || 600,
    height: spec.height,
    cursor,
    legend: {show: spec.legend ?? true, live: true},
    scales,
    axes: [xAxis(), spec.yAxis ?? valueAxis()],
    series: [{label: xLabel(), value: xLegendValue}, ...spec.series],
    ...(spec.bands ? {bands: spec.bands} : {}),
    hooks: {...groupHooks(group, spec.root), draw: [spec.draw], ...spec.hooks},
  };
}
