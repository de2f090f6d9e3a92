// One run: its findings next to charts of loss, learning rate, gradient norm, loss scale,
// throughput and the per-layer gradient heatmap, all on one shared, zoomable step axis.

import {api, isAbort, type Finding, type Range, type RunSummary} from './api';
import {ChartGroup} from './chartGroup';
import {chartCard} from './card';
import {EnvelopeChart, type Marker} from './charts';
import {el} from './dom';
import {findingKey, renderFindings} from './findings';
import {formatStep, visibleName} from './format';
import {GradientHeatmap} from './heatmap';
import {convertHint} from './overview';
import {download, fileName, findingsCsv, findingsJson} from './download';
import {setTip} from './tooltip';
import {SettingsBar} from './controls';
import {runColor} from './colors';
import {bindText, kindNamesLanguage, label, lang, t} from './i18n';
import {onSettings, settings} from './settings';
import {onTheme} from './theme';
import {Timeline} from './xaxis';

interface ChartPlan {
  id: string;
  titleKey: string;
  roles: string[];
  log?: boolean;
  color: string;
  height?: number;
  wide?: boolean;
  markers?: boolean;
  optional?: boolean; // no "not logged" row when absent
  peakRole?: string; // a window-maximum series drawn over this one when logged
  perRank?: boolean; // a job's other ranks drawn beside this run
}

// Step time (or throughput) sits next to the loss: a slow step or a slow rank explains a stalled run.
const CHARTS: ChartPlan[] = [
  {id: 'loss', titleKey: 'chartLoss', roles: ['loss'], peakRole: 'loss_max', color: '#1a73e8', height: 220, markers: true},
  {id: 'throughput', titleKey: 'chartThroughput', roles: ['step_time_ms', 'step_time_s', 'throughput'], color: '#12858a', height: 220, markers: true, perRank: true},
  {id: 'lr', titleKey: 'chartLr', roles: ['lr'], color: '#188038', markers: true},
  {id: 'grad_norm', titleKey: 'chartGradNorm', roles: ['grad_norm'], color: '#a142f4', log: true, markers: true},
  {id: 'loss_scale', titleKey: 'chartLossScale', roles: ['loss_scale'], color: '#e37400', log: true},
  {id: 'eval_loss', titleKey: 'chartEvalLoss', roles: ['eval_loss'], color: '#c5221f', markers: true, optional: true},
];

/** A zoom window around a finding: its span plus context on both sides. */
export function findingWindow(finding: Finding, extent: Range | null): Range {
  const end = finding.end_step ?? finding.step;
  const runLength = extent ? extent.end - extent.start : 0;
  const pad = Math.max(10, (end - finding.step) * 1.5, runLength * 0.02);
  let start = finding.step - pad;
  let stop = end + pad;
  if (extent) {
    start = Math.max(extent.start, start);
    stop = Math.min(extent.end, stop);
    if (!(stop > start)) [start, stop] = [extent.start, extent.end];
  }
  return {start, end: stop};
}

export class RunView {
  readonly root: HTMLElement;
  private readonly header = el('div', {class: 'run-header'});
  private readonly findingsPane = el('div', {class: 'findings-pane'});
  private readonly grid = el('div', {class: 'chart-grid'});
  private readonly resetButton: HTMLButtonElement;
  private readonly settingsBar = new SettingsBar();
  private readonly convertNote = el('div', {class: 'convert-hint', attrs: {hidden: ''}});
  /** The logdir, for the `tb-health convert` command line. */
  logdir = '';
  private group: ChartGroup | null = null;
  private charts: EnvelopeChart[] = [];
  private run: string | null = null;
  private findings: Finding[] = [];
  private findingsLang: string | null = null; // the language the server wrote `findings` in
  private activeKey: string | null = null;
  private shownVersion = '';
  private summary: RunSummary | null = null;
  private loading: AbortController | null = null;

  private allRuns: RunSummary[] = [];

  /** `switchRun` opens another run from the header's run menu. */
  constructor(private readonly switchRun: (run: string) => void = () => undefined) {
    this.resetButton = bindText(
      el('button', {class: 'btn', attrs: {type: 'button', disabled: ''}, on: {click: () => this.group?.zoomTo(null)}}),
      'resetZoom',
    );
    this.root = el('div', {class: 'run-view'}, [
      this.header,
      el('div', {class: 'run-body'}, [
        el('aside', {class: 'findings-aside'}, [
          el('div', {class: 'pane-header'}, [bindText(el('h3', {class: 'pane-title'}), 'findings'), ...this.downloadButtons()]),
          this.findingsPane,
        ]),
        el('div', {class: 'charts-pane'}, [this.convertNote, this.settingsBar.root, this.grid]),
      ]),
    ]);
    onSettings((changed) => void this.settingsChanged(changed));
    // keyboard: arrows walk the findings (zooming to each), Esc leaves a zoom
    this.findingsPane.addEventListener('keydown', (event) => this.findingsKey(event));
    this.root.addEventListener('keydown', (event) => {
      if (event.key === 'Escape' && this.group?.zoom) {
        event.preventDefault();
        this.group.zoomTo(null);
      }
    });
    onTheme(() => this.group?.redrawAll());
  }

  private downloadButtons(): HTMLElement[] {
    const button = (key: string, extension: string, type: string, write: (run: string, findings: Finding[]) => string) =>
      setTip(
        bindText(
          el('button', {
            class: 'btn small',
            data: {download: extension},
            attrs: {type: 'button'},
            on: {click: () => this.run && download(fileName(this.run, extension), write(this.run, this.findings), type)},
          }),
          key,
        ),
        t('downloadHint'),
      );
    return [button('downloadCsv', 'csv', 'text/csv;charset=utf-8', findingsCsv), button('downloadJson', 'json', 'application/json', findingsJson)];
  }

  private findingsKey(event: KeyboardEvent): void {
    if (event.key !== 'ArrowDown' && event.key !== 'ArrowUp') return;
    const items = [...this.findingsPane.querySelectorAll<HTMLElement>('li.finding')];
    if (!items.length) return;
    event.preventDefault();
    const current = items.findIndex((item) => item === document.activeElement || item.contains(document.activeElement));
    const next = current < 0 ? 0 : Math.max(0, Math.min(items.length - 1, current + (event.key === 'ArrowDown' ? 1 : -1)));
    const finding = this.findings.find((f) => findingKey(f) === items[next].dataset.key);
    if (finding) this.focusFinding(finding);
    this.findingsPane.querySelector<HTMLElement>(`li.finding[data-key="${CSS.escape(items[next].dataset.key ?? '')}"]`)?.focus();
  }

  private async settingsChanged(changed: string): Promise<void> {
    const group = this.group;
    if (!group || !this.summary) return;
    if (changed === 'xAxis') await this.loadTimeline(this.summary, group);
    group.rebuildAll();
  }

  /** The run's step -> wall-time map, needed once the x axis shows time. */
  private async loadTimeline(summary: RunSummary, group: ChartGroup, force = false): Promise<void> {
    if (settings.xAxis === 'step' || (group.timeline && !force)) return;
    const signals = summary.signals ?? {};
    const tag = signals.loss ?? Object.values(signals)[0];
    if (!tag) return;
    try {
      const data = await api.series(summary.run, tag, 4000);
      if (data.wall_times && data.first_wall_time !== undefined && data.first_wall_time !== null) {
        group.timeline = new Timeline(data.steps, data.wall_times, data.first_wall_time);
      }
    } catch (error) {
      if (!isAbort(error)) group.timeline = null; // the axis stays in steps
    }
  }

  /** Every run, for the header's run menu and a job's other ranks. */
  setRuns(runs: RunSummary[]): void {
    this.allRuns = runs;
  }

  /** The other ranks of this run's job that log `role`, as thin lines beside it. */
  private rankOverlays(run: string, role: string): {run: string; tag: string; color: string}[] {
    const job = this.allRuns.find((r) => r.run === run)?.job;
    if (!job) return [];
    const ranks = this.allRuns.filter((r) => r.job === job);
    if (ranks.length < 2) return [];
    return ranks
      .map((r, i) => ({run: r.run, tag: r.signals?.[role] ?? '', color: runColor(r.run, i)}))
      .filter((o) => o.run !== run && o.tag);
  }

  currentRun(): string | null {
    return this.run;
  }

  /** Shows `run` (or refreshes it in place when its data changed); keeps zoom when refreshing. */
  async show(summary: RunSummary): Promise<void> {
    const version = `${summary.steps?.last}|${summary.last_update}|${summary.status}`;
    if (summary.run === this.run) {
      this.renderHeader(summary);
      if (version !== this.shownVersion) {
        this.shownVersion = version;
        await this.refreshData(summary);
      }
      return;
    }
    this.shownVersion = version;
    await this.open(summary);
  }

  private async open(summary: RunSummary): Promise<void> {
    performance.clearMarks('health:open');
    performance.clearMeasures('health:charts-drawn');
    performance.mark('health:open');
    delete document.body.dataset.chartsDrawnMs;
    this.loading?.abort();
    const controller = new AbortController();
    this.loading = controller;
    this.group?.destroy();
    this.run = summary.run;
    this.findings = [];
    this.activeKey = null;
    this.renderHeader(summary);
    this.findingsPane.replaceChildren(bindText(el('p', {class: 'empty'}), 'loading'));
    this.grid.replaceChildren();
    const group = new ChartGroup();
    this.group = group;
    group.extent = summary.steps ? {start: summary.steps.first, end: summary.steps.last} : null;
    group.onZoom((zoom) => {
      this.resetButton.disabled = zoom === null;
      this.root.dataset.zoom = zoom ? `${Math.round(zoom.start)}-${Math.round(zoom.end)}` : '';
    });
    let firstDraw = true;
    group.onAllReady(() => {
      if (!firstDraw) return;
      firstDraw = false;
      const measure = performance.measure('health:charts-drawn', 'health:open');
      document.body.dataset.chartsDrawnMs = measure.duration.toFixed(1);
    });
    // The runs route already names the tag of every role: no round trip before the charts fetch.
    this.buildCharts(summary.run, summary.signals ?? {}, group);
    await this.loadTimeline(summary, group);
    await Promise.all([group.reloadAll(), this.loadFindings(summary.run, controller.signal)]);
  }

  private async refreshData(summary: RunSummary): Promise<void> {
    const group = this.group;
    if (!group) return;
    group.extent = summary.steps ? {start: summary.steps.first, end: summary.steps.last} : null;
    const controller = this.loading ?? new AbortController();
    await this.loadTimeline(summary, group, true);
    await Promise.all([group.reloadAll(), this.loadFindings(summary.run, controller.signal)]);
  }

  private async loadFindings(run: string, signal: AbortSignal): Promise<void> {
    try {
      const report = await api.report(run, signal);
      if (signal.aborted || run !== this.run || report.language !== lang()) return; // stale: asked before a switch
      this.findings = report.runs[0]?.findings ?? [];
      this.findingsLang = report.language;
      this.renderFindingsList();
      for (const chart of this.charts) chart.redraw();
    } catch (error) {
      if (!isAbort(error)) this.findingsPane.replaceChildren(bindText(el('p', {class: 'error'}), 'loadFailed', {error: String(error)}));
    }
  }

  /** Whether the findings can be drawn in the tab's language throughout: their messages (the
   * server's `/report`) and their kinds' names (its `/runs`) come in two answers, and the
   * labels around them (severity, evidence, advice) from the tab's own tables. After a language
   * switch the findings stay as they were until both answers speak the new language, so that no
   * finding reads half in one language and half in the other. */
  private findingsSpeakOneLanguage(): boolean {
    const names = kindNamesLanguage(); // null: the server sent no names (kinds then show their ids)
    return this.findingsLang === lang() && (names === null || names === lang());
  }

  /** Asks the server for the findings again (in the language now chosen). */
  reloadFindings(): void {
    if (this.run) void this.loadFindings(this.run, (this.loading ?? new AbortController()).signal);
  }

  private renderFindingsList(): void {
    if (!this.findingsSpeakOneLanguage()) {  // the list on screen stays whole; only the highlight moves
      for (const item of this.findingsPane.querySelectorAll<HTMLElement>('li.finding')) {
        item.classList.toggle('active', item.dataset.key === this.activeKey);
      }
      return;
    }
    renderFindings(this.findingsPane, this.findings, this.activeKey, (finding) => this.focusFinding(finding), this.run);
  }

  focusFinding(finding: Finding): void {
    this.activeKey = findingKey(finding);
    this.renderFindingsList();
    this.group?.zoomTo(findingWindow(finding, this.group.extent));
  }

  private markers(): Marker[] {
    return this.findings
      .filter((f) => f.severity !== 'info' || findingKey(f) === this.activeKey)
      .map((f) => ({step: f.step, endStep: f.end_step, severity: f.severity, active: findingKey(f) === this.activeKey}));
  }

  private buildCharts(run: string, signals: Record<string, string>, group: ChartGroup): void {
    this.charts = [];
    for (const plan of CHARTS) {
      const role = plan.roles.find((r) => signals[r]);
      const titleKey = plan.id === 'throughput' && role && role !== 'throughput' ? (role === 'step_time_s' ? 'chartStepTimeS' : 'chartStepTime') : plan.titleKey;
      const tag = role ? signals[role] : '';
      if (!tag && plan.optional) continue;
      if (!tag) {
        const placeholder = chartCard(plan.id, titleKey, '—', plan.wide);
        placeholder.setState('empty', 'notLogged');
        this.grid.append(placeholder.root);
        continue;
      }
      const chart = new EnvelopeChart(
        {
          id: plan.id,
          titleKey,
          run,
          tag,
          log: plan.log,
          color: plan.color,
          height: plan.height,
          wide: plan.wide,
          markers: plan.markers ? () => this.markers() : undefined,
          peakTag: plan.peakRole ? signals[plan.peakRole] : undefined,
          overlays: plan.perRank && role ? this.rankOverlays(run, role) : undefined,
        },
        group,
      );
      this.charts.push(chart);
      this.grid.append(chart.card.root);
    }
    // the heatmap comes right under the loss and step time: vanishing or exploding gradients
    // explain most loss trouble
    const heatmap = new GradientHeatmap(run, group).card.root;
    const drawn = (id: string) => this.charts.find((c) => c.card.root.dataset.chart === id)?.card.root;
    const [loss, pace] = [drawn('loss'), drawn('throughput')];
    // the loss takes the whole first row when there is no step time to put beside it
    if (loss && !pace) loss.classList.add('wide');
    if (pace && !loss) pace.classList.add('wide');
    const after = pace ?? loss;
    if (after) after.after(heatmap);
    else this.grid.prepend(heatmap);
    // half-width charts come in pairs; a last one alone takes the whole row instead of leaving a hole
    const halves = this.charts.filter((c) => !c.card.root.classList.contains('wide') && !['loss', 'throughput'].includes(c.card.root.dataset.chart ?? ''));
    if (halves.length % 2 === 1) halves[halves.length - 1].card.root.classList.add('wide');
  }

  private renderHeader(summary: RunSummary): void {
    this.summary = summary;
    bindText(this.resetButton, 'resetZoom'); // it may have been detached while the language changed
    const signals = Object.keys(summary.signals ?? {}).map((role) => el('span', {class: 'chip', text: label('signal', role)}));
    const menu = el('select', {class: 'input run-menu', title: t('run'), attrs: {'aria-label': t('run')}});
    const names = this.allRuns.map((r) => r.run);
    for (const run of names.includes(summary.run) ? names : [summary.run, ...names]) {
      menu.append(el('option', {text: visibleName(run), attrs: {value: run}}));
    }
    menu.value = summary.run;
    menu.addEventListener('change', () => this.switchRun(menu.value));
    this.convertNote.hidden = summary.source !== 'mindspore';
    if (summary.source === 'mindspore') this.convertNote.replaceChildren(...convertHint(1, this.logdir));
    this.header.replaceChildren(
      el('h2', {class: 'run-title', text: visibleName(summary.run), title: visibleName(summary.run)}),
      menu,
      el('span', {class: `badge status-${summary.status}`, text: label('status', summary.status)}),
      el('span', {class: 'muted', text: summary.steps ? t('steps', {from: formatStep(summary.steps.first), to: formatStep(summary.steps.last)}) : t('noData')}),
      el('span', {class: 'chips'}, signals),
      el('span', {class: 'spacer'}),
      this.resetButton,
    );
  }

  /** The chosen run is gone (or none was chosen): say so instead of showing stale charts. */
  showMissing(): void {
    this.loading?.abort();
    this.group?.destroy();
    this.group = null;
    this.run = null;
    this.charts = [];
    this.header.replaceChildren(bindText(el('span', {class: 'muted'}), 'pickRun'));
    this.findingsPane.replaceChildren();
    this.grid.replaceChildren();
  }

  relabel(): void {
    if (!this.run) return;
    this.renderFindingsList();
    if (this.summary) this.renderHeader(this.summary);
    this.settingsBar.render();
    for (const chart of this.charts) chart.relabel();
  }
}
