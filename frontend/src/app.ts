// The tab's shell: header (views, refresh state, language switch) and the three views. It polls
// the `runs` route and listens to TensorBoard's reloads, handing fresh summaries to the views
// without rebuilding them, so selection, zoom and scroll survive every refresh.

import {visibleName} from './format';
import {api, type AnalysisStatus, type RunSummary, type StorageProblem, type WorkerNotice} from './api';
import {setTensorBoardRuns} from './colors';
import {CompareView} from './compare';
import {el} from './dom';
import {bindText, lang, relabel, relativeAge, setKindNames, setLang, t, type Lang} from './i18n';
import {Overview} from './overview';
import {Poller} from './poll';
import {RunView} from './runView';
import {loadState, saveState, type AppState, type View} from './state';
import {listenToHostReloads} from './tbHost';
import {followTheme} from './theme';
import {installTooltips, setTip} from './tooltip';

const POLL_INTERVAL_MS = 5000;
const TB_RUNS_WAIT_MS = 2000; // how long a refresh waits for TensorBoard's own run list (colours)

export class App {
  private readonly state: AppState = loadState();
  private runs: RunSummary[] = [];
  private lastRefresh: number | null = null;
  private tbRunsRequest: Promise<void> | null = null;
  private readonly overview: Overview;
  private readonly runView = new RunView((run) => this.openRun(run));
  private readonly compare: CompareView;
  private readonly tabs = new Map<View, HTMLButtonElement>();
  private readonly refreshState = el('span', {class: 'refresh-state muted'});
  private readonly errorBanner = el('div', {class: 'error-banner', attrs: {hidden: ''}});
  /** The logdir could not be read whole (object storage failing): said above the runs read before. */
  private readonly storageBanner = el('div', {class: 'error-banner storage-problem', attrs: {hidden: '', role: 'status'}});
  /** The server's analysis worker died: said above the runs it analysed before, which stay shown. */
  private readonly workerBanner = el('div', {class: 'error-banner worker-notice', attrs: {hidden: '', role: 'status'}});
  private analysis: AnalysisStatus | null = null;
  private readonly langButtons = new Map<Lang, HTMLButtonElement>();
  private readonly main = el('main', {class: 'main'});
  private readonly poller = new Poller(POLL_INTERVAL_MS, () => this.refresh());

  constructor(private readonly host: HTMLElement) {
    this.overview = new Overview(this.state, {
      openRun: (run) => this.openRun(run),
      openCompare: () => this.setView('compare'),
      changed: () => saveState(this.state),
    });
    this.compare = new CompareView(
      (run) => this.openRun(run),
      (run) => this.toggleCompare(run),
    );
  }

  mount(): void {
    document.documentElement.lang = lang() === 'zh' ? 'zh-CN' : 'en';
    followTheme();
    installTooltips();
    const nav = el('nav', {class: 'tabs'});
    for (const [view, key] of [['overview', 'overview'], ['run', 'run'], ['compare', 'compare']] as [View, string][]) {
      const button = bindText(el('button', {class: 'tab', attrs: {type: 'button'}, data: {view}, on: {click: () => this.setView(view)}}), key);
      this.tabs.set(view, button);
      nav.append(button);
    }
    const langSwitch = el('div', {class: 'lang-switch', attrs: {role: 'group', 'aria-label': 'Language / 语言'}});
    for (const [code, text] of [['en', 'EN'], ['zh', '中文']] as [Lang, string][]) {
      const button = el('button', {class: 'lang', text, data: {lang: code}, attrs: {type: 'button'}, on: {click: () => this.switchLang(code)}});
      this.langButtons.set(code, button);
      langSwitch.append(button);
    }
    const reload = el('button', {class: 'btn icon reload', text: '⟳', attrs: {type: 'button'}, on: {click: () => void this.poller.now()}});
    setTip(reload, t('refresh'));
    reload.setAttribute('aria-label', t('refresh'));
    this.main.append(this.overview.root, this.runView.root, this.compare.root);
    this.host.replaceChildren(
      el('div', {class: 'health-app'}, [
        el('header', {class: 'topbar'}, [
          bindText(el('h1', {class: 'brand'}), 'title'),
          nav,
          el('span', {class: 'spacer'}),
          this.refreshState,
          reload,
          langSwitch,
        ]),
        this.errorBanner,
        this.storageBanner,
        this.workerBanner,
        this.main,
      ]),
    );
    this.updateLangButtons();
    this.applyView();
    listenToHostReloads(() => void this.poller.now());
    window.setInterval(() => this.renderRefreshState(), 1000);
    this.poller.start();
  }

  private async refresh(): Promise<void> {
    try {
      const [response] = await Promise.all([api.runs(), this.tensorBoardRunOrder()]);
      if (response.language !== lang()) return; // asked before a language switch: its answer follows
      if (setKindNames(response.kinds, response.language)) {
        this.runView.relabel();
        this.compare.relabel();
      }
      this.runs = response.runs;
      this.lastRefresh = Date.now();
      this.errorBanner.hidden = true;
      this.showStorageProblem(response.storage ?? null);
      this.showWorkerNotice(response.worker ?? null);
      this.analysis = response.analysis ?? null;
      this.overview.update(this.runs, response.logdir, response.jobs);
      this.runView.setRuns(this.runs);
      this.runView.logdir = response.logdir;
      await this.showActiveView();
    } catch (error) {
      this.errorBanner.hidden = false;
      this.errorBanner.textContent = t('loadFailed', {error: String((error as Error).message ?? error)});
    }
    this.renderRefreshState();
  }

  private showStorageProblem(problem: StorageProblem | null): void {
    this.storageBanner.hidden = problem === null;
    this.storageBanner.textContent = problem
      ? t('storageProblem', {error: problem.message, seconds: String(Math.ceil(problem.retry_in_s))})
      : '';
  }

  private showWorkerNotice(worker: WorkerNotice | null): void {
    this.workerBanner.hidden = worker === null;
    const code = String(worker?.exit_code ?? '?');
    this.workerBanner.textContent = worker
      ? worker.state === 'restarting'
        ? t('workerRestarting', {code})
        : t('workerRestarted', {count: String(worker.restarts), code})
      : '';
  }

  /** TensorBoard's own run list gives its run colours. Its loader can be slow or stuck (a huge
   * logdir, a FIFO named like an event file), so the overview waits for it at most
   * TB_RUNS_WAIT_MS; a late answer still sets the colours for the next refresh, and only one
   * request is in flight at a time. */
  private tensorBoardRunOrder(): Promise<unknown> {
    if (!this.tbRunsRequest) {
      this.tbRunsRequest = api
        .tensorboardRuns()
        .then(setTensorBoardRuns)
        .catch(() => undefined)
        .finally(() => {
          this.tbRunsRequest = null;
        });
    }
    return Promise.race([this.tbRunsRequest, new Promise((resolve) => window.setTimeout(resolve, TB_RUNS_WAIT_MS))]);
  }

  private async showActiveView(): Promise<void> {
    if (this.state.view === 'run') {
      const summary = this.runs.find((r) => r.run === this.state.run);
      if (summary) await this.runView.show(summary);
      else this.runView.showMissing();
    } else if (this.state.view === 'compare') {
      await this.compare.show(this.runs, this.state.compare);
    }
  }

  private toggleCompare(run: string): void {
    if (this.state.compare.has(run)) this.state.compare.delete(run);
    else this.state.compare.add(run);
    saveState(this.state);
    this.overview.renderRows();
    void this.showActiveView();
  }

  private openRun(run: string): void {
    this.state.run = run;
    this.setView('run');
  }

  private setView(view: View): void {
    this.state.view = view;
    saveState(this.state);
    this.applyView();
    if (this.lastRefresh !== null) void this.showActiveView();
  }

  private applyView(): void {
    const roots: Record<View, HTMLElement> = {overview: this.overview.root, run: this.runView.root, compare: this.compare.root};
    for (const [view, root] of Object.entries(roots) as [View, HTMLElement][]) root.hidden = view !== this.state.view;
    for (const [view, button] of this.tabs) {
      button.classList.toggle('active', view === this.state.view);
      button.disabled = view === 'run' && !this.state.run;
    }
    const runTab = this.tabs.get('run');
    if (runTab) runTab.title = visibleName(this.state.run ?? '');
    this.host.dataset.view = this.state.view;
  }

  private switchLang(code: Lang): void {
    setLang(code);
    relabel(this.host);
    this.overview.relabel();
    this.runView.relabel();
    this.compare.relabel();
    this.updateLangButtons();
    this.renderRefreshState();
    void this.poller.now(); // the findings are written by the server: ask again in this language
    this.runView.reloadFindings();
    const reload = this.host.querySelector<HTMLElement>('button.reload');
    if (reload) {
      setTip(reload, t('refresh'));
      reload.setAttribute('aria-label', t('refresh'));
    }
  }

  private updateLangButtons(): void {
    for (const [code, button] of this.langButtons) button.classList.toggle('active', code === lang());
  }

  private renderRefreshState(): void {
    const age = this.lastRefresh === null ? null : (Date.now() - this.lastRefresh) / 1000;
    const updated = age === null ? t('loading') : t('updated', {age: relativeAge(age)});
    const analysis = this.analysis;
    this.refreshState.textContent =
      analysis && analysis.state === 'analysing'
        ? `${updated} · ${t('analysing', {done: String(analysis.done), total: String(analysis.total)})}`
        : updated;
  }
}
