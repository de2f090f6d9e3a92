// Per-layer gradient norms as a heatmap: layers by depth (top = first layer) against step, colour
// on a log scale, so vanishing (dark early layers) or exploding (bright columns) gradients show
// at a glance. Drawn by a uPlot draw hook so it shares the step axis, cursor and zoom.

import uPlot from 'uplot';

import {api, HttpError, isAbort, type HeatmapResponse, type Range} from './api';
import {chartCard, type Card} from './card';
import type {ChartGroup, GroupMember} from './chartGroup';
import {groupPlotOptions, plotWidth} from './plotOptions';
import {cssColor} from './theme';
import {rampColor, rampGradientCss} from './colors';
import {el} from './dom';
import {formatNumber, formatStep} from './format';
import {bindText} from './i18n';
import {setTip, showTip} from './tooltip';

const ROW_PX = 14;
const ZERO_COLOR = '#000000'; // exactly-zero norms (dead gradients): off the log ramp, shown apart
const LABEL_PX = 13;
const MIN_HEIGHT = 150;
const MAX_HEIGHT = 420;

const LABEL_FONT = '12px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
const LABEL_WIDTH_KEY = 'tb-health.heatmapLabelWidth';
const LABEL_WIDTH_RANGE: [number, number] = [60, 600];
const measure = document.createElement('canvas').getContext('2d');

function textWidth(text: string): number {
  if (!measure) return text.length * 7;
  measure.font = LABEL_FONT;
  return measure.measureText(text).width;
}

/** `text` cut in the middle to fit `width` px: both the model part and the parameter stay readable. */
export function middleEllipsis(text: string, width: number): string {
  if (textWidth(text) <= width) return text;
  let keep = text.length - 1;
  while (keep > 2) {
    const head = Math.ceil(keep / 2);
    const candidate = `${text.slice(0, head)}…${text.slice(text.length - (keep - head))}`;
    if (textWidth(candidate) <= width) return candidate;
    keep--;
  }
  return '…';
}

function savedLabelWidth(): number {
  try {
    const saved = Number(localStorage.getItem(LABEL_WIDTH_KEY));
    if (saved >= LABEL_WIDTH_RANGE[0] && saved <= LABEL_WIDTH_RANGE[1]) return saved;
  } catch {
    // storage blocked
  }
  return 170;
}

/** `model.layers.3.attention.wq.weight` -> `layers.3.attention.wq` (enough to tell rows apart). */
export function shortLayerName(name: string): string {
  return name.replace(/^(model|network|backbone|_backbone)\./, '').replace(/\.(weight|bias)$/, (m) => (m === '.bias' ? '.b' : ''));
}

export class GradientHeatmap implements GroupMember {
  readonly card: Card;
  ready = false;
  private plot: uPlot | null = null;
  private data: HeatmapResponse | null = null;
  private logMin = 0;
  private logMax = 1;
  private inflight: AbortController | null = null;
  private readonly legendLow = el('span', {class: 'ramp-label'});
  private readonly legendHigh = el('span', {class: 'ramp-label'});
  private readonly hover = el('span', {class: 'heatmap-hover'});
  private readonly layerCount = el('span', {class: 'ramp-label'});
  private readonly zeroKey = el('span', {class: 'ramp-label zero-key', attrs: {hidden: ''}}, [el('span', {class: 'zero-swatch'}), ' = 0']);
  private readonly resize: ResizeObserver;
  private labelWidth = savedLabelWidth();
  private fetching = false;
  /** Over the layer labels: their full names on hover, and a handle to resize the column. */
  private readonly labelHover = el('div', {class: 'heatmap-labels'});
  private readonly labelHandle = el('div', {class: 'heatmap-label-handle', attrs: {role: 'separator', 'aria-orientation': 'vertical', tabindex: '0'}});

  constructor(
    private readonly run: string,
    private readonly group: ChartGroup,
  ) {
    this.card = chartCard('heatmap', 'chartHeatmap', 'grad_norm/*', true);
    const ramp = el('span', {class: 'ramp'});
    ramp.style.backgroundImage = rampGradientCss();
    this.card.root.querySelector('header')?.append(
      el('span', {class: 'ramp-legend'}, [this.layerCount, this.zeroKey, this.legendLow, ramp, this.legendHigh]),
    );
    this.card.root.append(el('div', {class: 'heatmap-footer'}, [this.hover]));
    this.card.body.classList.add('heatmap-body');
    this.card.body.append(this.labelHover, this.labelHandle);
    this.labelHover.addEventListener('mousemove', (event) => this.describeLabel(event));
    this.wireHandle();
    this.resize = new ResizeObserver(() => {
      if (this.plot) this.plot.setSize({width: this.card.body.clientWidth, height: this.height()});
    });
    this.resize.observe(this.card.body);
    group.add(this);
  }

  private height(): number {
    const rows = this.data?.layers.length ?? 0;
    return Math.max(MIN_HEIGHT, Math.min(MAX_HEIGHT, rows * ROW_PX + 40));
  }

  applyRange(range: Range): void {
    this.plot?.setScale('x', {min: range.start, max: range.end});
  }

  async reload(): Promise<void> {
    this.inflight?.abort();
    const controller = new AbortController();
    this.inflight = controller;
    this.ready = false;
    this.fetching = true;
    this.card.root.dataset.state = 'loading';
    try {
      const width = Math.min(600, plotWidth(this.card.body));
      const data = await api.heatmap(this.run, width, this.group.requestRange(), controller.signal);
      if (controller.signal.aborted) return;
      this.fetching = false;
      this.show(data);
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

  private show(data: HeatmapResponse): void {
    const heightBefore = this.height();
    this.data = data;
    let lo = Infinity;
    let hi = -Infinity;
    let zeros = 0;
    for (const row of data.values) {
      for (const v of row) {
        if (v !== null && v <= 0) zeros++;
        if (v !== null && v > 0) {
          const lv = Math.log10(v);
          if (lv < lo) lo = lv;
          if (lv > hi) hi = lv;
        }
      }
    }
    if (!Number.isFinite(lo)) [lo, hi] = [0, 1];
    if (hi - lo < 1e-9) hi = lo + 1;
    [this.logMin, this.logMax] = [lo, hi];
    this.zeroKey.hidden = zeros === 0;
    this.card.root.dataset.zeroCells = String(zeros);
    this.legendLow.textContent = formatNumber(10 ** lo);
    this.legendHigh.textContent = formatNumber(10 ** hi);
    bindText(this.layerCount, 'layers', {n: data.layers.length});
    this.card.root.dataset.layers = String(data.layers.length);
    this.card.root.dataset.buckets = String(data.steps.length);
    if (!data.layers.length) {
      this.card.setState('empty', 'notLogged');
    } else if (!data.steps.length) {
      this.card.setState('empty', 'noData');
    } else {
      this.card.setState('loading');
    }
    const table: uPlot.AlignedData = [data.steps.map((step) => this.group.toX(step)), data.steps.map(() => null)];
    if (!this.plot) {
      this.plot = new uPlot(this.plotOptions(), table, this.card.body);
      this.card.body.append(this.labelHover, this.labelHandle);
    } else {
      if (heightBefore !== this.height()) this.plot.setSize({width: this.card.body.clientWidth, height: this.height()});
      this.plot.setData(table, true);
    }
  }

  private plotOptions(): uPlot.Options {
    return groupPlotOptions({
      group: this.group,
      root: this.card.root,
      body: this.card.body,
      height: this.height(),
      legend: false,
      cursorPoints: false,
      scales: {layer: {auto: false, range: () => [0, Math.max(1, this.data?.layers.length ?? 1)]}},
      yAxis: {
        scale: 'layer',
        stroke: () => cssColor('--chart-text'),
        grid: {show: false},
        ticks: {stroke: () => cssColor('--chart-grid'), width: 1},
        size: () => this.labelWidth,
        gap: 2,
        splits: () => this.layerSplits(),
        values: (_u, splits) => splits.map((s) => this.layerLabel(s)),
      },
      series: [{scale: 'layer', show: true, stroke: 'transparent', points: {show: false}}],
      draw: (u) => this.drawCells(u),
      hooks: {setCursor: [(u: uPlot) => this.describeCursor(u)]},
    });
  }

  /** Row centres to label: every row when they fit, else evenly thinned. */
  private layerSplits(): number[] {
    const n = this.data?.layers.length ?? 0;
    const every = Math.max(1, Math.ceil((n * LABEL_PX) / Math.max(1, this.height() - 40)));
    const splits: number[] = [];
    for (let i = 0; i < n; i += every) splits.push(n - i - 0.5);
    return splits;
  }

  /** Drag (or arrow keys) to widen or narrow the label column; remembered. */
  private wireHandle(): void {
    const setWidth = (width: number) => {
      this.labelWidth = Math.round(Math.max(LABEL_WIDTH_RANGE[0], Math.min(LABEL_WIDTH_RANGE[1], width)));
      try {
        localStorage.setItem(LABEL_WIDTH_KEY, String(this.labelWidth));
      } catch {
        // not remembered
      }
      this.card.root.dataset.labelWidth = String(this.labelWidth);
      // a new axis size needs uPlot's layout pass, which setSize runs
      this.plot?.setSize({width: this.card.body.clientWidth, height: this.height()});
      this.placeOverlays();
    };
    this.labelHandle.addEventListener('pointerdown', (event) => {
      event.preventDefault();
      this.labelHandle.setPointerCapture(event.pointerId);
      const startX = event.clientX;
      const startWidth = this.labelWidth;
      const move = (e: PointerEvent) => setWidth(startWidth + e.clientX - startX);
      const up = () => {
        this.labelHandle.removeEventListener('pointermove', move);
        this.labelHandle.removeEventListener('pointerup', up);
      };
      this.labelHandle.addEventListener('pointermove', move);
      this.labelHandle.addEventListener('pointerup', up);
    });
    this.labelHandle.addEventListener('keydown', (event) => {
      if (event.key === 'ArrowLeft') setWidth(this.labelWidth - 20);
      if (event.key === 'ArrowRight') setWidth(this.labelWidth + 20);
    });
  }

  /** The label overlay and the handle sit over the axis of layer names. */
  private placeOverlays(): void {
    const u = this.plot;
    if (!u) return;
    const left = u.over.offsetLeft;
    this.labelHover.style.cssText = `left:0;top:${u.over.offsetTop}px;width:${Math.max(0, left - 2)}px;height:${u.over.offsetHeight}px`;
    this.labelHandle.style.cssText = `left:${Math.max(0, left - 5)}px;top:${u.over.offsetTop}px;height:${u.over.offsetHeight}px`;
    this.card.root.dataset.labelWidth = String(this.labelWidth);
  }

  private describeLabel(event: MouseEvent): void {
    const u = this.plot;
    const layers = this.data?.layers ?? [];
    if (!u || !layers.length) return;
    const row = layers.length - 1 - Math.floor(u.posToVal(event.offsetY, 'layer'));
    const name = layers[row];
    if (name !== undefined && this.labelHover.dataset.tip !== name) {
      setTip(this.labelHover, name);
      showTip(this.labelHover);
    }
  }

  private layerLabel(split: number): string {
    const layers = this.data?.layers ?? [];
    const index = layers.length - Math.round(split + 0.5);
    const name = layers[index];
    if (name === undefined) return '';
    return middleEllipsis(shortLayerName(name), this.labelWidth - 12);
  }

  private drawCells(u: uPlot): void {
    const data = this.data;
    if (data && data.steps.length && data.layers.length) {
      const {ctx, bbox} = u;
      const n = data.layers.length;
      const span = this.logMax - this.logMin;
      const last = data.end_step ?? data.steps[data.steps.length - 1] + 1;
      ctx.save();
      ctx.beginPath();
      ctx.rect(bbox.left, bbox.top, bbox.width, bbox.height);
      ctx.clip();
      for (let j = 0; j < data.steps.length; j++) {
        const x0 = u.valToPos(this.group.toX(data.steps[j]), 'x', true);
        const x1 = u.valToPos(this.group.toX(j + 1 < data.steps.length ? data.steps[j + 1] : last), 'x', true);
        if (x1 < bbox.left || x0 > bbox.left + bbox.width) continue;
        const w = Math.max(1, x1 - x0 + 0.5);
        for (let i = 0; i < n; i++) {
          const v = data.values[i][j];
          if (v === null) continue;
          const y0 = u.valToPos(n - i, 'layer', true);
          const y1 = u.valToPos(n - i - 1, 'layer', true);
          ctx.fillStyle = v > 0 ? rampColor((Math.log10(v) - this.logMin) / span) : ZERO_COLOR;
          ctx.fillRect(x0, y0, w, Math.max(1, y1 - y0 + 0.5));
        }
      }
      ctx.restore();
    }
    this.placeOverlays();
    if (this.fetching) return; // a redraw of the old cells while new ones load
    if (this.card.root.dataset.state === 'loading') this.card.setState('ready');
    if (!this.ready) {
      this.ready = true;
      this.group.memberReady();
    }
  }

  private describeCursor(u: uPlot): void {
    const data = this.data;
    const {left, top, idx} = u.cursor;
    if (!data || left === undefined || top === undefined || left < 0 || idx === null || idx === undefined) {
      this.hover.textContent = '';
      return;
    }
    const n = data.layers.length;
    const row = n - 1 - Math.floor(u.posToVal(top, 'layer'));
    if (row < 0 || row >= n) {
      this.hover.textContent = `${formatStep(data.steps[idx])}`;
      return;
    }
    const value = data.values[row]?.[idx];
    this.hover.textContent = `${data.layers[row]} @ ${formatStep(data.steps[idx])}: ${formatNumber(value)}`;
  }

  rebuild(): void {
    this.plot?.destroy();
    this.plot = null;
    if (this.data) this.show(this.data);
  }

  redraw(): void {
    this.plot?.redraw(false, true);
  }

  destroy(): void {
    this.inflight?.abort();
    this.resize.disconnect();
    this.plot?.destroy();
    this.plot = null;
  }
}
