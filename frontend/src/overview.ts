// Every run with its verdict, finding counts, worst finding, last step and last update:
// sortable, filterable by status, kind and name, with the ranks of one job grouped.

import {exportUrl} from './api';
import type {JobSummary, RunSummary, Severity} from './api';
import {el} from './dom';
import {ageSeconds, formatStep, visibleName} from './format';
import {bindText, label, lang, relativeAge, t} from './i18n';
import {setTip} from './tooltip';
import type {AppState, SortKey} from './state';

const STATUS_RANK: Record<string, number> = {no_data: 0, healthy: 1, warning: 2, critical: 3};
const SEVERITY_RANK: Record<string, number> = {info: 0, warning: 1, critical: 2};
const STATUSES = ['critical', 'warning', 'healthy', 'no_data'];

interface Entry {
  job: string | null; // null for a run outside any job
  members: RunSummary[];
  aggregate: RunSummary;
}

export interface OverviewActions {
  openRun(run: string): void;
  openCompare(): void;
  changed(): void;
}

function sortValue(run: RunSummary, key: SortKey): number | string {
  switch (key) {
    case 'run':
      return run.run.toLowerCase();
    case 'status':
      return STATUS_RANK[run.status] ?? 0;
    case 'counts':
      return (run.counts?.critical ?? 0) * 1e12 + (run.counts?.warning ?? 0) * 1e6 + (run.counts?.info ?? 0);
    case 'worst':
      return run.worst ? SEVERITY_RANK[run.worst.severity] * 1e12 - run.worst.step : -1;
    case 'last_step':
      return run.steps?.last ?? -1;
    case 'last_update':
      return run.last_update ?? -1;
  }
}

/** Sorted by `key`; ties go to the most recently updated run, then by name. */
function compareBy(key: SortKey, descending: boolean) {
  return (a: RunSummary, b: RunSummary): number => {
    const [va, vb] = [sortValue(a, key), sortValue(b, key)];
    if (va !== vb) return (va < vb ? -1 : 1) * (descending ? -1 : 1);
    const updated = (b.last_update ?? -1) - (a.last_update ?? -1);
    return updated !== 0 ? updated : a.run.localeCompare(b.run);
  };
}

/** Finding counts as one line of pills (zeros left out), or a muted 0. */
export function countsCell(counts: Record<Severity, number>): HTMLElement {
  const pills = (['critical', 'warning', 'info'] as Severity[])
    .filter((s) => (counts[s] ?? 0) > 0)
    .map((s) => setTip(el('span', {class: `count sev-${s}`, text: String(counts[s]), data: {severity: s}}), `${counts[s]} × ${label('severity', s)}`));
  return el('td', {class: 'counts'}, pills.length ? pills : [el('span', {class: 'muted', text: '0'})]);
}

/** The worst finding's text (written by the server in the chosen language), whole in its tooltip. */
function worstText(worst: NonNullable<RunSummary['worst']>): {text: string; tip: string} {
  return {text: worst.message, tip: worst.message};
}

/** Shell quoting for a path in the suggested command. */
function quoted(path: string): string {
  return /^[\w./:-]+$/.test(path) ? path : `'${path.replace(/'/g, `'\\''`)}'`;
}

/** The hint for runs read from MindSpore summaries: TensorBoard's own tabs need them converted. */
export function convertHint(runs: number, logdir: string): HTMLElement[] {
  const source = logdir || '<logdir>';
  const target = logdir ? `${logdir.replace(/\/+$/, '')}_tensorboard` : '<output>';
  const command = `tb-health convert ${quoted(source)} ${quoted(target)}`;
  const copy = el('button', {class: 'btn', attrs: {type: 'button'}, text: t('copy')});
  copy.addEventListener('click', () => {
    void navigator.clipboard?.writeText(command).then(() => {
      copy.textContent = t('copied');
    });
  });
  return [el('span', {text: t('convertHint', {n: runs})}), el('code', {class: 'command', text: command}), copy];
}

export class Overview {
  readonly root: HTMLElement;
  private runs: RunSummary[] = [];
  /** The server's roll-up of each job of two ranks or more, by job name. */
  private jobs = new Map<string, JobSummary>();
  private loaded = false;
  private readonly tbody = el('tbody');
  private readonly statusSelect = el('select', {class: 'input'});
  private readonly kindSelect = el('select', {class: 'input'});
  private readonly nameInput = el('input', {class: 'input name-filter', attrs: {type: 'search'}});
  private readonly compareButton = el('button', {class: 'btn primary', attrs: {type: 'button'}});
  private readonly reportLink = el('a', {class: 'btn report-link', attrs: {download: '', target: '_blank'}});
  private readonly message = el('p', {class: 'empty'});
  private readonly convertHint = el('div', {class: 'convert-hint', attrs: {hidden: ''}});
  private readonly headCells = new Map<SortKey, HTMLElement>();

  constructor(
    private readonly state: AppState,
    private readonly actions: OverviewActions,
  ) {
    this.nameInput.value = state.filters.name;
    this.nameInput.addEventListener('input', () => {
      state.filters.name = this.nameInput.value;
      this.renderRows();
    });
    this.statusSelect.addEventListener('change', () => {
      state.filters.status = this.statusSelect.value;
      this.renderRows();
    });
    this.kindSelect.addEventListener('change', () => {
      state.filters.kind = this.kindSelect.value;
      this.renderRows();
    });
    this.compareButton.addEventListener('click', () => actions.openCompare());
    // keyboard: arrows walk the runs (their links), Enter opens one
    this.tbody.addEventListener('keydown', (event) => {
      if (event.key !== 'ArrowDown' && event.key !== 'ArrowUp') return;
      const links = [...this.tbody.querySelectorAll<HTMLElement>('a.run-link, tr.job-row button.toggle')];
      const current = links.findIndex((link) => link === document.activeElement);
      if (current < 0) return;
      event.preventDefault();
      links[Math.max(0, Math.min(links.length - 1, current + (event.key === 'ArrowDown' ? 1 : -1)))].focus();
    });
    const head = el('tr', {}, [
      el('th', {class: 'col-check'}),
      this.sortHeader('run', 'colRun'),
      this.sortHeader('status', 'colStatus'),
      this.sortHeader('counts', 'colCounts'),
      this.sortHeader('worst', 'colWorst'),
      this.sortHeader('last_step', 'colLastStep', 'num'),
      this.sortHeader('last_update', 'colUpdated', 'num'),
    ]);
    this.root = el('div', {class: 'overview'}, [
      el('div', {class: 'toolbar'}, [this.nameInput, this.statusSelect, this.kindSelect, el('span', {class: 'spacer'}), this.reportLink, this.compareButton]),
      this.convertHint,
      el('table', {class: 'runs-table'}, [el('thead', {}, [head]), this.tbody]),
      this.message,
    ]);
    this.relabel();
  }

  private sortHeader(key: SortKey, labelKey: string, extra = ''): HTMLElement {
    const cell = el('th', {class: `sortable ${extra}`, data: {sort: key}, attrs: {tabindex: '0'}});
    const toggle = () => {
      const sort = this.state.sort;
      if (sort.key === key) sort.descending = !sort.descending;
      else {
        sort.key = key;
        sort.descending = key !== 'run';
      }
      this.renderRows();
    };
    cell.addEventListener('click', toggle);
    cell.addEventListener('keydown', (event) => {
      if (event.key === 'Enter') toggle();
    });
    cell.append(bindText(el('span'), labelKey), el('span', {class: 'sort-mark'}));
    this.headCells.set(key, cell);
    return cell;
  }

  /** The logdir, for the `tb-health convert` command line. */
  logdir = '';

  update(runs: RunSummary[], logdir = '', jobs: JobSummary[] = []): void {
    this.logdir = logdir;
    this.runs = runs;
    this.jobs = new Map(jobs.map((job) => [job.job as string, job]));
    this.loaded = true;
    const known = new Set(runs.map((r) => r.run));
    for (const run of [...this.state.compare]) if (!known.has(run)) this.state.compare.delete(run);
    this.renderKindOptions();
    this.renderRows();
  }

  relabel(): void {
    this.nameInput.placeholder = t('filterName');
    this.nameInput.setAttribute('aria-label', t('filterName'));
    this.statusSelect.setAttribute('aria-label', t('colStatus'));
    this.kindSelect.setAttribute('aria-label', t('allKinds'));
    this.reportLink.textContent = t('report');
    setTip(this.reportLink, t('reportTitle'));
    this.renderStatusOptions();
    this.renderKindOptions();
    this.renderRows();
  }

  private renderStatusOptions(): void {
    const options = [el('option', {text: t('allStatuses'), attrs: {value: ''}})];
    for (const status of STATUSES) options.push(el('option', {text: label('status', status), attrs: {value: status}}));
    this.statusSelect.replaceChildren(...options);
    this.statusSelect.value = this.state.filters.status;
  }

  private renderKindOptions(): void {
    const kinds = [...new Set(this.runs.flatMap((r) => r.kinds ?? []))].sort();
    if (this.state.filters.kind && !kinds.includes(this.state.filters.kind)) kinds.push(this.state.filters.kind);
    const options = [el('option', {text: t('allKinds'), attrs: {value: ''}})];
    for (const kind of kinds) options.push(el('option', {text: label('kind', kind), attrs: {value: kind}}));
    this.kindSelect.replaceChildren(...options);
    this.kindSelect.value = this.state.filters.kind;
  }

  private matches(run: RunSummary): boolean {
    const {status, kind, name} = this.state.filters;
    if (status && run.status !== status) return false;
    if (kind && !(run.kinds ?? []).includes(kind)) return false;
    if (name && !run.run.toLowerCase().includes(name.toLowerCase())) return false;
    return true;
  }

  private entries(): Entry[] {
    const byJob = new Map<string, RunSummary[]>();
    const entries: Entry[] = [];
    // the server rolls up jobs of two ranks or more; a job of one rank is just a run
    for (const run of this.runs.filter((r) => this.matches(r))) {
      if (!run.job || !this.jobs.has(run.job)) entries.push({job: null, members: [run], aggregate: run});
      else byJob.set(run.job, [...(byJob.get(run.job) ?? []), run]);
    }
    for (const [job, members] of byJob) entries.push({job, members, aggregate: this.jobs.get(job) as JobSummary});
    const order = compareBy(this.state.sort.key, this.state.sort.descending);
    entries.sort((a, b) => order(a.aggregate, b.aggregate));
    for (const entry of entries) entry.members.sort(order);
    return entries;
  }

  renderRows(): void {
    for (const [key, cell] of this.headCells) {
      const mark = cell.querySelector('.sort-mark') as HTMLElement;
      const active = this.state.sort.key === key;
      mark.textContent = active ? (this.state.sort.descending ? ' ▼' : ' ▲') : '';
      cell.setAttribute('aria-sort', active ? (this.state.sort.descending ? 'descending' : 'ascending') : 'none');
    }
    const rows: HTMLElement[] = [];
    for (const entry of this.entries()) {
      if (entry.job === null) {
        rows.push(this.runRow(entry.aggregate, false));
        continue;
      }
      const collapsed = this.state.collapsedJobs.has(entry.job);
      rows.push(this.jobRow(entry, collapsed));
      if (!collapsed) for (const member of entry.members) rows.push(this.runRow(member, true));
    }
    this.tbody.replaceChildren(...rows);
    // the report covers the runs on screen (the filters applied), in the tab's language
    const shown = this.runs.filter((r) => this.matches(r)).map((r) => r.run);
    this.reportLink.hidden = shown.length === 0;
    this.reportLink.setAttribute('href', exportUrl(shown, lang()));
    const mindspore = this.runs.filter((r) => r.source === 'mindspore').length;
    this.convertHint.hidden = mindspore === 0;
    if (mindspore) this.convertHint.replaceChildren(...convertHint(mindspore, this.logdir));
    const n = this.state.compare.size;
    bindText(this.compareButton, 'compareSelected', {n});
    this.compareButton.disabled = n < 2;
    if (!this.loaded) bindText(this.message, 'loading');
    else if (!this.runs.length) bindText(this.message, 'noRuns');
    else if (!rows.length) bindText(this.message, 'noMatch');
    else {
      delete this.message.dataset.i18n;
      this.message.textContent = '';
    }
  }

  private commonCells(run: RunSummary): HTMLElement[] {
    const counts = run.counts ?? {info: 0, warning: 0, critical: 0};
    let worst: HTMLElement;
    if (run.worst) {
      const {text, tip} = worstText(run.worst);
      worst = el('td', {class: 'worst'}, [
        el('span', {class: `dot sev-${run.worst.severity}`}),
        el('span', {class: 'worst-kind', text: label('kind', run.worst.kind)}),
        el('span', {class: 'muted', text: ` · ${t('step')} ${formatStep(run.worst.step)}`}),
        setTip(el('div', {class: 'worst-message', text, attrs: {tabindex: '0'}}), tip, 'en'),
      ]);
    } else worst = el('td', {class: 'worst muted', text: '—'});
    const age = ageSeconds(run.last_update);
    return [
      el('td', {}, [el('span', {class: `badge status-${run.status}`, text: label('status', run.status)})]),
      countsCell(counts),
      worst,
      el('td', {class: 'num', text: formatStep(run.steps?.last)}),
      el('td', {
        class: 'num muted',
        text: relativeAge(age),
        title: run.last_update ? new Date(run.last_update * 1000).toLocaleString() : '',
      }),
    ];
  }

  private runRow(run: RunSummary, inJob: boolean): HTMLElement {
    const checkbox = el('input', {attrs: {type: 'checkbox', 'aria-label': t('selectForCompare')}, title: t('selectForCompare')});
    checkbox.checked = this.state.compare.has(run.run);
    checkbox.addEventListener('change', () => {
      if (checkbox.checked) this.state.compare.add(run.run);
      else this.state.compare.delete(run.run);
      this.renderRows();
      this.actions.changed();
    });
    // what the run logged: shown on hover or focus, not repeated on every row
    const chips = Object.keys(run.signals ?? {}).map((role) => setTip(el('span', {class: 'chip', text: label('signal', role)}), run.signals[role]));
    if (run.analysis === 'online') chips.unshift(setTip(el('span', {class: 'chip online-verdict', text: t('onlineVerdict')}), t('onlineVerdictTip')));
    const name = el('a', {
      class: 'run-link',
      text: visibleName(run.run),
      title: visibleName(run.run),
      attrs: {href: '#', role: 'button'},
      on: {
        click: (event) => {
          event.preventDefault();
          this.actions.openRun(run.run);
        },
      },
    });
    return el('tr', {class: inJob ? 'run-row in-job' : 'run-row', data: {run: run.run, status: run.status, updated: String(run.last_update ?? '')}}, [
      el('td', {class: 'col-check'}, [checkbox]),
      el('td', {class: 'run-cell'}, [name, chips.length ? el('div', {class: 'chips row-signals'}, chips) : null]),
      ...this.commonCells(run),
    ]);
  }

  private jobRow(entry: Entry, collapsed: boolean): HTMLElement {
    const job = entry.job as string;
    const toggle = el('button', {
      class: 'toggle',
      text: collapsed ? '▸' : '▾',
      attrs: {type: 'button', 'aria-expanded': String(!collapsed)},
      on: {
        click: () => {
          if (collapsed) this.state.collapsedJobs.delete(job);
          else this.state.collapsedJobs.add(job);
          this.renderRows();
        },
      },
    });
    return el('tr', {class: 'job-row', data: {job, status: entry.aggregate.status, updated: String(entry.aggregate.last_update ?? '')}}, [
      el('td', {class: 'col-check'}, [toggle]),
      el('td', {class: 'run-cell'}, [
        el('span', {class: 'job-name', text: t('job', {name: job})}),
        el('span', {class: 'muted', text: ` · ${t('ranks', {n: entry.members.length})}`}),
        triageNote(entry.aggregate as JobSummary),
      ]),
      ...this.commonCells(entry.aggregate),
    ]);
  }
}

/** Under triage, how many of the job's ranks were analysed in full and how many trusted from
 * their own online verdict (the names on hover). */
function triageNote(job: JobSummary): HTMLElement | null {
  if (!job.triage) return null;
  const {full, online} = job.triage;
  const note = el('span', {class: 'muted triage-note', text: ` · ${t('triageNote', {full: full.length, online: online.length})}`});
  return setTip(note, `${t('analysedInFull')}: ${full.map(visibleName).join(', ')}`);
}
