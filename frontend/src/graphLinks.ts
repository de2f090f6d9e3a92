// Links from a finding that names a parameter to that parameter's node in TensorBoard's Graphs tab.
//
// TensorBoard's graph dashboard takes only the run from the URL (`#graphs&run=<run>`), and even
// that is lost when its run selector falls back to the first run; no node can be selected by URL.
// So the link's href opens the Graphs tab on the run, and a click in the tab (same origin as the
// host page) also picks the run in the dashboard's selector and selects the node the way the
// dashboard's own node search does: it sets the `selectedNode` of the host page's `tf-graph-board`,
// which expands the scopes around the node and pans to it. These are TensorBoard's page
// internals (TensorBoard 2.x); should they change, the link still opens the Graphs tab.
//
// Graphs written by tb-health (hooks' `log_graph`, `tb-health convert`) name a parameter's node
// `<scope of its layer>/<parameter name>`, so the node is the one whose last segment is the name.

import type {Finding} from './api';
import {el} from './dom';
import {t} from './i18n';

const GRAPHS_INFO = new URL('../graphs/info', new URL('./', import.meta.url));
const INFO_MAX_AGE_MS = 30_000; // a graph appears after a run's first step: look again now and then
const SELECT_TIMEOUT_MS = 120_000; // a large graph takes a while to lay out on a busy machine
const SELECT_POLL_MS = 250;
// Tags that carry one parameter's name: our hooks' per-parameter tags, MindSpore's `<param>/auto`.
const PARAMETER_TAG_PREFIXES = ['grad_norm/', 'weight_norm/', 'update_ratio/', 'weight/', 'grad/'];
const MINDSPORE_AUTO_SUFFIX = '/auto';

let graphRuns: {at: number; runs: Promise<Set<string>>} | null = null;

/** Runs that have a graph in TensorBoard's Graphs tab (empty when the Graphs plugin is absent). */
function runsWithGraphs(): Promise<Set<string>> {
  const now = Date.now();
  if (!graphRuns || now - graphRuns.at > INFO_MAX_AGE_MS) {
    const runs = fetch(GRAPHS_INFO, {headers: {Accept: 'application/json'}})
      .then((response) => (response.ok ? response.json() : {}))
      .then((info: Record<string, {run_graph?: boolean}>) =>
        new Set(Object.entries(info).filter(([, entry]) => entry && entry.run_graph).map(([run]) => run)),
      )
      .catch(() => new Set<string>());
    graphRuns = {at: now, runs};
  }
  return graphRuns.runs;
}

/** The parameter a finding names: the first listed one, else the one in its tag. */
export function findingParameter(finding: Finding): string | null {
  const listed = finding.evidence?.parameters;
  if (Array.isArray(listed) && typeof listed[0] === 'string' && listed[0]) return listed[0];
  const tag = finding.tag ?? '';
  for (const prefix of PARAMETER_TAG_PREFIXES) {
    if (tag.startsWith(prefix) && tag.length > prefix.length) return tag.slice(prefix.length);
  }
  if (tag.endsWith(MINDSPORE_AUTO_SUFFIX) && tag.length > MINDSPORE_AUTO_SUFFIX.length) {
    return tag.slice(0, -MINDSPORE_AUTO_SUFFIX.length);
  }
  return null;
}

function hostWindow(): Window | null {
  try {
    if (window.parent !== window && window.parent.location.href) return window.parent;
  } catch {
    // cross-origin host: the link alone opens the graph
  }
  return null;
}

/** The URL of a run's graph in TensorBoard's Graphs tab. */
export function graphUrl(run: string): string {
  const host = hostWindow();
  const url = new URL(host ? host.location.href : new URL('../', window.location.href).href);
  url.hash = `graphs&run=${encodeURIComponent(run)}`;
  return url.href;
}

interface GraphBoard extends HTMLElement {
  renderHierarchy?: {hierarchy?: {getNodeMap(): Record<string, unknown>}};
  selectedNode?: string;
}

interface GraphControls extends HTMLElement {
  datasets?: {name: string}[];
  _selectedRunIndex?: number;
  set?(path: string, value: unknown): void;
}

interface GraphLoader extends HTMLElement {
  _graphRunTag?: {run: string};
}

/** The first element matching `selector` in `root` or any shadow root below it. */
function deepQuery(root: Document | ShadowRoot, selector: string): Element | null {
  const pending: (Document | ShadowRoot)[] = [root];
  while (pending.length) {
    const scope = pending.pop()!;
    const hit = scope.querySelector(selector);
    if (hit) return hit;
    for (const element of Array.from(scope.querySelectorAll('*'))) {
      if (element.shadowRoot) pending.push(element.shadowRoot);
    }
  }
  return null;
}

/** The node of `parameter` in a graph's node names: the name itself or `<scope>/<parameter>`. */
export function parameterNode(names: string[], parameter: string): string | null {
  return names.find((name) => name === parameter) ?? names.find((name) => name.endsWith(`/${parameter}`)) ?? null;
}

/** Once the host shows the run's graph, select the parameter's node (as the node search does).
 *
 * The dashboard's run selector falls back to the first run when its list of runs arrives, so the
 * run is chosen in the selector as a person would. The node is selected in the first graph drawn
 * after the loader has loaded this run (never in the previous run's). */
function selectWhenDrawn(host: Window, run: string, parameter: string): void {
  const deadline = Date.now() + SELECT_TIMEOUT_MS;
  let stale: unknown = null; // the hierarchy drawn while another run was loaded
  const timer = host.setInterval(() => {
    if (Date.now() > deadline || !host.location.hash.startsWith('#graphs')) {
      host.clearInterval(timer);
      return;
    }
    const controls = deepQuery(host.document, 'tf-graph-controls') as GraphControls | null;
    const loader = deepQuery(host.document, 'tf-graph-dashboard-loader') as GraphLoader | null;
    const board = deepQuery(host.document, 'tf-graph-board') as GraphBoard | null;
    if (!controls || !loader || !board) return;
    const index = (controls.datasets ?? []).findIndex((dataset) => dataset.name === run);
    if (index < 0) return; // the list of runs has not arrived yet
    if (controls._selectedRunIndex !== index) {
      if (controls.set) controls.set('_selectedRunIndex', index);
      else controls._selectedRunIndex = index;
    }
    if (loader._graphRunTag?.run !== run) {
      stale = board.renderHierarchy ?? null;
      return;
    }
    const hierarchy = board.renderHierarchy?.hierarchy;
    if (!hierarchy || board.renderHierarchy === stale) return;
    const node = parameterNode(Object.keys(hierarchy.getNodeMap()), parameter);
    host.clearInterval(timer);
    if (node) {
      board.selectedNode = node;
      host.document.body.dataset.tbHealthGraphNode = `${run}\n${node}`; // what was selected, for tests
    }
  }, SELECT_POLL_MS);
}

/** A "Graph" link for a finding that names a parameter, shown once its run turns out to have a graph. */
export function graphLink(run: string, finding: Finding): HTMLElement | null {
  const parameter = findingParameter(finding);
  if (!parameter) return null;
  const link = el('a', {
    class: 'tb-link graph-link',
    text: `${t('graphLink')} ↗`,
    attrs: {href: graphUrl(run), target: '_top', title: t('openGraph', {name: parameter}), hidden: ''},
    data: {parameter},
    on: {
      click: (event) => {
        event.stopPropagation();
        const host = hostWindow();
        if (!host) return; // the href opens the run's graph
        event.preventDefault();
        host.location.hash = `graphs&run=${encodeURIComponent(run)}`;
        selectWhenDrawn(host, run, parameter);
      },
    },
  });
  void runsWithGraphs().then((runs) => {
    if (runs.has(run)) link.removeAttribute('hidden');
  });
  return link;
}
