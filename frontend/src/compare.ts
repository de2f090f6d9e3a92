// Several runs side by side: their losses on one chart (each downsampled on the server) and a
// table of health and loss figures that marks the best run, to pick the model to keep.

import uPlot from 'uplot';

import {api, isAbort, type Range, type RunSummary, type SeriesResponse} from './api';
import {chartCard, type Card} from './card';
import {ChartGroup, type GroupMember} from './chartGroup';
import {groupCursor, groupHooks, plotWidth, stepAxisValues, valueAxisValues, xRange} from './charts';
import {RUN_PALETTE} from './colors';
import {el} from './dom';
import {formatNumber, formatStep, visibleName} from './format';
import {bindText, label, t} from './i18n';

interface LossStats {
  final: number | null;
  best: number | null;
}

function lastFinite(values: (number | null)[]): number | null {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && Number.isFinite(values[i])) return values[i];
  return null;
}

function minFinite(values: (number | null)[]): number | null {
  let best: number | null = null;
  for (const v of values) if (v !== null && (best === null || v < best)) best = v;
  return best;
}

/** The best run: lowest final loss among runs without critical findings. */
export function bestRun(runs: RunSummary[], stats: Map<string, LossStats>): string | null {
  let best: string | null = null;
  let bestLoss = Infinity;
  for (const run of runs) {
    const final = stats.get(run.run)?.final;
    if (run.status === 'critical' || final === null || final === undefined) continue;
    if (final < bestLoss) [best, bestLoss] = [run.run, final];
  }
  return best;
}

class CompareChart implements GroupMember {
  readonly card: Card;
  ready = false;
  private plot: uPlot | null = null;
  private inflight: AbortController | null = null;
  private runs: RunSummary[] = [];
  private readonly resize: ResizeObserver;

  constructor(
    private readonly group: ChartGroup,
    private readonly onStats: (stats: Map<string, LossStats>) => void,
  ) {
    this.card = chartCard('compare-loss', 'chartLoss', 'loss', true);
    this.resize = new ResizeObserver(() => this.plot?.setSize({width: this.card.body.clientWidth, height: 300}));
    this.resize.observe(this.card.body);
    group.add(this);
  }

  setRuns(runs: RunSummary[]): void {
    this.runs = runs;
    this.plot?.destroy();
    this.plot = null;
  }

  applyRange(range: Range): void {
    this.plot?.setScale('x', {min: range.start, max: range.end});
  }

  async reload(): Promise<void> {
    this.inflight?.abort();
    const controller = new AbortController();
    this.inflight = controller;
    this.ready = false;
    this.card.setState('loading');
    const width = plotWidth(this.card.body);
    const withLoss = this.runs.filter((r) => r.signals?.loss);
    try {
      const responses = await Promise.all(
        withLoss.map((r) => api.series(r.run, r.signals.loss, width, this.group.zoom, controller.signal)),
      );
      if (controller.signal.aborted) return;
      this.show(withLoss, responses);
    } catch (error) {
      if (isAbort(error)) return;
      this.card.setState('error', 'loadFailed', {error: String((error as Error).message)});
      this.ready = true;
    }
  }

  private show(runs: RunSummary[], responses: SeriesResponse[]): void {
    if (this.group.zoom === null) {
      const stats = new Map<string, LossStats>();
      responses.forEach((r, i) => stats.set(runs[i].run, {final: lastFinite(r.mean), best: minFinite(r.min)}));
      this.onStats(stats);
    }
    if (!runs.length) {
      this.card.setState('empty', 'notLogged');
      this.ready = true;
      return;
    }
    // Per run: its mean line plus a faint min/max band, so a spike keeps its height here too.
    const table = uPlot.join(responses.map((r) => [r.steps, r.mean, r.min, r.max] as uPlot.AlignedData));
    if (!this.plot) {
      const series: uPlot.Series[] = [{label: t('step'), value: (_u, v) => formatStep(v)}];
      const bands: uPlot.Band[] = [];
      for (const run of runs) {
        const color = RUN_PALETTE[this.runs.indexOf(run) % RUN_PALETTE.length];
        const mean = series.length;
        series.push({label: visibleName(run.run), stroke: color, width: 1.5, spanGaps: true, value: (_u, v) => formatNumber(v)});
        for (const bound of ['min', 'max']) {
          series.push({label: `${visibleName(run.run)} ${t(bound)}`, stroke: `${color}55`, width: 0.5, spanGaps: true, value: (_u, v) => formatNumber(v)});
        }
        bands.push({series: [mean + 2, mean + 1], fill: `${color}1a`});
      }
      this.plot = new uPlot(
        {
          width: this.card.body.clientWidth || 600,
          height: 300,
          cursor: groupCursor(this.group),
          legend: {show: true, live: true},
          scales: {x: {time: false, range: xRange(this.group)}},
          axes: [
            {values: stepAxisValues, size: 30, gap: 2},
            {values: valueAxisValues, size: 60, gap: 2},
          ],
          series,
          bands,
          hooks: {...groupHooks(this.group, this.card.root), draw: [() => this.drawn()]},
        },
        table,
        this.card.body,
      );
      // the legend lists runs only; their band edges stay out of it
      this.plot.root.querySelectorAll<HTMLElement>('.u-legend .u-series').forEach((row, i) => {
        if (i > 0 && (i - 1) % 3 !== 0) row.hidden = true;
      });
    } else {
      this.plot.setData(table, true);
    }
  }

  private drawn(): void {
    if (this.card.root.dataset.state === 'loading') this.card.setState('ready');
    this.ready = true;
  }

  destroy(): void {
    this.inflight?.abort();
    this.resize.disconnect();
    this.plot?.destroy();
  }
}

export class CompareView {
  readonly root: HTMLElement;
  private readonly group = new ChartGroup();
  private readonly chart: CompareChart;
  private readonly tbody = el('tbody');
  private readonly hint = el('p', {class: 'muted'});
  private readonly picker = el('div', {class: 'run-picker'});
  private runs: RunSummary[] = [];
  private stats = new Map<string, LossStats>();
  private shownKey = '';

  constructor(
    private readonly openRun: (run: string) => void,
    private readonly toggleRun: (run: string) => void,
  ) {
    this.chart = new CompareChart(this.group, (stats) => {
      this.stats = stats;
      this.renderTable();
    });
    const head = el('tr', {}, [
      el('th'),
      bindText(el('th'), 'colRun'),
      bindText(el('th'), 'colStatus'),
      bindText(el('th'), 'colCounts'),
      bindText(el('th'), 'colWorst'),
      bindText(el('th', {class: 'num'}), 'colLastStep'),
      bindText(el('th', {class: 'num'}), 'finalLoss'),
      bindText(el('th', {class: 'num'}), 'bestLoss'),
    ]);
    this.root = el('div', {class: 'compare-view'}, [
      this.picker,
      this.hint,
      this.chart.card.root,
      el('table', {class: 'runs-table compare-table'}, [el('thead', {}, [head]), this.tbody]),
      bindText(el('p', {class: 'muted'}), 'bestHint'),
    ]);
  }

  /** Every run as a toggle, so the comparison can be changed without leaving the view. */
  private renderPicker(all: RunSummary[], selected: Set<string>): void {
    this.picker.replaceChildren(
      ...all.map((run) =>
        el('button', {
          class: selected.has(run.run) ? 'pick selected' : 'pick',
          text: visibleName(run.run),
          title: visibleName(run.run),
          data: {run: run.run},
          attrs: {type: 'button', 'aria-pressed': String(selected.has(run.run))},
          on: {click: () => this.toggleRun(run.run)},
        }),
      ),
    );
  }

  /** Shows the selected runs; reloads when the selection or their data changed. */
  async show(all: RunSummary[], selection: Set<string>): Promise<void> {
    const selected = all.filter((r) => selection.has(r.run));
    this.renderPicker(all, selection);
    const key = selected.map((r) => `${r.run}|${r.steps?.last}|${r.last_update}`).join('\n');
    const selectionChanged = selected.map((r) => r.run).join('\n') !== this.runs.map((r) => r.run).join('\n');
    this.runs = selected;
    if (selected.length < 2) bindText(this.hint, 'pickRuns');
    else {
      delete this.hint.dataset.i18n;
      this.hint.textContent = '';
    }
    this.renderTable();
    if (key === this.shownKey) return;
    this.shownKey = key;
    if (selectionChanged) {
      this.chart.setRuns(selected);
      this.group.zoom = null;
    }
    const firsts = selected.map((r) => r.steps?.first).filter((s): s is number => s !== undefined);
    const lasts = selected.map((r) => r.steps?.last).filter((s): s is number => s !== undefined);
    this.group.extent = firsts.length ? {start: Math.min(...firsts), end: Math.max(...lasts)} : null;
    await this.group.reloadAll();
  }

  relabel(): void {
    this.renderTable();
  }

  private renderTable(): void {
    const best = bestRun(this.runs, this.stats);
    const rows = this.runs.map((run, i) => {
      const stats = this.stats.get(run.run);
      const swatch = el('span', {class: 'swatch'});
      swatch.style.background = RUN_PALETTE[i % RUN_PALETTE.length];
      const counts = run.counts ?? {info: 0, warning: 0, critical: 0};
      return el('tr', {class: run.run === best ? 'best-row' : '', data: {run: run.run}}, [
        el('td', {}, [swatch]),
        el('td', {class: 'run-cell'}, [
          el('a', {
            class: 'run-link',
            text: visibleName(run.run),
            attrs: {href: '#'},
            on: {
              click: (event) => {
                event.preventDefault();
                this.openRun(run.run);
              },
            },
          }),
          run.run === best ? el('span', {class: 'badge best', text: t('best')}) : null,
        ]),
        el('td', {}, [el('span', {class: `badge status-${run.status}`, text: label('status', run.status)})]),
        el('td', {class: 'counts'}, [
          el('span', {class: 'count sev-critical', text: String(counts.critical)}),
          el('span', {class: 'count sev-warning', text: String(counts.warning)}),
          el('span', {class: 'count sev-info', text: String(counts.info)}),
        ]),
        el('td', {class: 'worst', text: run.worst ? `${label('kind', run.worst.kind)} @ ${formatStep(run.worst.step)}` : '—', title: run.worst?.message ?? ''}),
        el('td', {class: 'num', text: formatStep(run.steps?.last)}),
        el('td', {class: 'num', text: formatNumber(stats?.final)}),
        el('td', {class: 'num', text: formatNumber(stats?.best)}),
      ]);
    });
    this.tbody.replaceChildren(...rows);
  }
}
