// Several runs side by side: their losses on one chart (each downsampled on the server) and a
// table of health and loss figures that marks the best run, to pick the model to keep.

import uPlot from 'uplot';

import {api, isAbort, type Range, type RunSummary, type SeriesResponse} from './api';
import {chartCard, type Card} from './card';
import {ChartGroup, type GroupMember} from './chartGroup';
import {runColor} from './colors';
import {SettingsBar} from './controls';
import {smooth, useLog} from './scaling';
import {onSettings, settings} from './settings';
import {onTheme} from './theme';
import {el} from './dom';
import {formatNumber, formatStep, visibleName} from './format';
import {bindText, label, t} from './i18n';
import {countsCell} from './overview';
import {groupPlotOptions, legendValue, plotWidth} from './plotOptions';

interface LossStats {
  final: number | null;
  best: number | null;
}

export function lastFinite(values: (number | null)[]): number | null {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && Number.isFinite(values[i])) return values[i];
  return null;
}

export function minFinite(values: (number | null)[]): number | null {
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

/** A run's x values in the current axis mode: steps, or its own clock (relative to its start). */
export function runXs(response: SeriesResponse): number[] {
  if (settings.xAxis === 'step' || !response.wall_times) return response.steps;
  const origin = settings.xAxis === 'relative' ? (response.first_wall_time ?? response.wall_times[0] ?? 0) : 0;
  let latest = -Infinity;
  // uPlot needs ascending x: a clock that went backwards (a restart) is held flat
  return response.wall_times.map((w) => (latest = Math.max(latest, w - origin)));
}

/** uPlot series (after x's) of runs drawn in their colours: per run its smoothed line, its
 * faint raw mean (shown when smoothing) and the edges of its faint min/max band, 4 series each. */
export function runSeries(runs: {name: string; color: string}[], showMean: boolean): {series: uPlot.Series[]; bands: uPlot.Band[]} {
  const value = legendValue;
  const series: uPlot.Series[] = [];
  const bands: uPlot.Band[] = [];
  for (const {name, color} of runs) {
    const first = series.length + 1; // uPlot's index: x is series 0
    series.push({label: name, stroke: color, width: 1.6, spanGaps: true, value});
    series.push({label: `${name} ${t('mean')}`, stroke: `${color}50`, width: 0.8, spanGaps: true, show: showMean, value});
    for (const bound of ['min', 'max']) {
      series.push({label: `${name} ${t(bound)}`, stroke: `${color}30`, width: 0.5, spanGaps: true, value});
    }
    bands.push({series: [first + 3, first + 2], fill: `${color}14`});
  }
  return {series, bands};
}

class CompareChart implements GroupMember {
  readonly card: Card;
  ready = false;
  private plot: uPlot | null = null;
  private plotLog: boolean | null = null;
  private inflight: AbortController | null = null;
  private runs: RunSummary[] = [];
  private last: {runs: RunSummary[]; responses: SeriesResponse[]} | null = null;
  private drawn: (number | null)[][] = [];
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
    this.last = null;
    this.plot?.destroy();
    this.plot = null;
  }

  applyRange(range: Range): void {
    this.plot?.setScale('x', {min: range.start, max: range.end});
  }

  redraw(): void {
    this.plot?.redraw(false, true);
  }

  rebuild(): void {
    this.plot?.destroy();
    this.plot = null;
    if (this.last) this.show(this.last.runs, this.last.responses);
  }

  async reload(): Promise<void> {
    // on a time axis the runs do not share a step -> time map: zoom locally on what is loaded
    if (!this.group.zoomInSteps() && this.last) {
      this.rebuild();
      return;
    }
    this.inflight?.abort();
    const controller = new AbortController();
    this.inflight = controller;
    this.ready = false;
    this.card.setState('loading');
    const width = plotWidth(this.card.body);
    const withLoss = this.runs.filter((r) => r.signals?.loss);
    try {
      const responses = await Promise.all(
        withLoss.map((r) => api.series(r.run, r.signals.loss, width, this.group.requestRange(), controller.signal)),
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
    this.last = {runs, responses};
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
    const log = useLog(responses.flatMap((r) => [r.min, r.max]));
    const fix = log ? (v: (number | null)[]) => v.map((x) => (x !== null && x > 0 ? x : null)) : (v: (number | null)[]) => v;
    // Per run: its smoothed line over the faint raw mean and a faint min/max band, so a spike
    // keeps its height here too.
    const tables = responses.map((r) => {
      const perBucket = r.steps.length ? r.total_points / r.steps.length : 1;
      return [runXs(r), fix(smooth(r.mean, settings.smoothing, perBucket)), fix(r.mean), fix(r.min), fix(r.max)] as uPlot.AlignedData;
    });
    const table = uPlot.join(tables);
    this.drawn = table.slice(1).filter((_, i) => i % 4 === 1) as (number | null)[][]; // the raw means
    this.card.root.dataset.scale = log ? 'log' : 'linear';
    if (this.plot && this.plotLog !== log) {
      this.plot.destroy();
      this.plot = null;
    }
    if (!this.plot) {
      this.plotLog = log;
      const {series, bands} = runSeries(
        runs.map((run) => ({name: visibleName(run.run), color: runColor(run.run, this.runs.indexOf(run))})),
        settings.smoothing > 0,
      );
      this.plot = new uPlot(
        groupPlotOptions({
          group: this.group,
          root: this.card.root,
          body: this.card.body,
          height: 300,
          y: {log, values: () => this.drawn},
          series,
          bands,
          draw: () => this.drawn_(),
        }),
        table,
        this.card.body,
      );
      // the legend lists runs only; their raw means and band edges stay out of it
      this.plot.root.querySelectorAll<HTMLElement>('.u-legend .u-series').forEach((row, i) => {
        if (i > 0 && (i - 1) % 4 !== 0) row.hidden = true;
      });
    } else {
      this.plot.setData(table, true);
    }
  }

  private drawn_(): void {
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
  private readonly settingsBar = new SettingsBar();
  private runs: RunSummary[] = [];
  private stats = new Map<string, LossStats>();
  private shownKey = '';
  private readonly table: HTMLElement;

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
    this.table = el('table', {class: 'runs-table compare-table'}, [el('thead', {}, [head]), this.tbody]);
    this.root = el('div', {class: 'compare-view'}, [
      this.picker,
      this.hint,
      this.settingsBar.root,
      this.chart.card.root,
      this.table,
      bindText(el('p', {class: 'muted'}), 'bestHint'),
    ]);
    onSettings((changed) => {
      if (changed === 'xAxis') {
        // steps and seconds do not convert across runs: a new axis starts unzoomed
        this.group.zoom = null;
        this.group.extent = settings.xAxis === 'step' ? this.stepExtent() : null;
      }
      this.group.rebuildAll();
    });
    onTheme(() => this.group.rebuildAll()); // run colours have a dark variant
  }

  private stepExtent(): Range | null {
    const firsts = this.runs.map((r) => r.steps?.first).filter((s): s is number => s !== undefined);
    const lasts = this.runs.map((r) => r.steps?.last).filter((s): s is number => s !== undefined);
    return firsts.length ? {start: Math.min(...firsts), end: Math.max(...lasts)} : null;
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
    // nothing to compare yet: no empty chart, no empty table, just what to do
    const comparing = selected.length >= 2;
    for (const node of [this.settingsBar.root, this.chart.card.root, this.table]) node.hidden = !comparing;
    if (!comparing) bindText(this.hint, 'pickRuns');
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
    this.group.extent = settings.xAxis === 'step' ? this.stepExtent() : null;
    if (comparing) await this.group.reloadAll();
  }

  relabel(): void {
    this.settingsBar.render();
    this.renderTable();
  }

  private renderTable(): void {
    const best = bestRun(this.runs, this.stats);
    const rows = this.runs.map((run, i) => {
      const stats = this.stats.get(run.run);
      const swatch = el('span', {class: 'swatch'});
      swatch.style.background = runColor(run.run, i);
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
        countsCell(counts),
        el('td', {class: 'worst', text: run.worst ? `${label('kind', run.worst.kind)} @ ${formatStep(run.worst.step)}` : '—', title: run.worst?.message ?? ''}),
        el('td', {class: 'num', text: formatStep(run.steps?.last)}),
        el('td', {class: 'num', text: formatNumber(stats?.final)}),
        el('td', {class: 'num', text: formatNumber(stats?.best)}),
      ]);
    });
    this.tbody.replaceChildren(...rows);
  }
}
