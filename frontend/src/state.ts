// What the user chose (view, run, comparison set, sort, filters). It lives across refreshes so
// polling never resets a selection; the view and runs are also kept in sessionStorage so that
// TensorBoard re-creating the iframe brings the user back where they were.

export type View = 'overview' | 'run' | 'compare';
export type SortKey = 'run' | 'status' | 'counts' | 'worst' | 'last_step' | 'last_update';

export interface AppState {
  view: View;
  run: string | null;
  compare: Set<string>;
  sort: {key: SortKey; descending: boolean};
  filters: {status: string; kind: string; name: string};
  collapsedJobs: Set<string>;
}

const STORAGE_KEY = 'tb-health.state';

export function loadState(): AppState {
  const state: AppState = {
    view: 'overview',
    run: null,
    compare: new Set(),
    sort: {key: 'status', descending: true}, // the worst runs first, the latest first among equals
    filters: {status: '', kind: '', name: ''},
    collapsedJobs: new Set(),
  };
  try {
    const saved = JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? 'null');
    if (saved && typeof saved === 'object') {
      if (['overview', 'run', 'compare'].includes(saved.view)) state.view = saved.view;
      if (typeof saved.run === 'string') state.run = saved.run;
      if (Array.isArray(saved.compare)) state.compare = new Set(saved.compare.filter((r: unknown) => typeof r === 'string'));
    }
  } catch {
    // storage blocked or corrupt: start fresh
  }
  const linked = linkedRun();
  if (linked) {
    state.view = 'run';
    state.run = linked;
  }
  return state;
}

// A link to one run (`http://host:6006/#health&run=<run>`, as notifications and reports send it):
// TensorBoard keeps the page's hash, the tab reads it from the top page (same origin).
export function linkedRun(): string | null {
  try {
    const hash = (window.parent !== window ? window.parent.location.hash : window.location.hash).replace(/^#/, '');
    const run = new URLSearchParams(hash).get('run');
    return run && run.length ? run : null;
  } catch {
    return null; // another origin, or no hash
  }
}

export function saveState(state: AppState): void {
  try {
    sessionStorage.setItem(STORAGE_KEY, JSON.stringify({view: state.view, run: state.run, compare: [...state.compare]}));
  } catch {
    // not persisted
  }
}
