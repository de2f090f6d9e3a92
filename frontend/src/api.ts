// Typed access to the plugin's routes (tb_health_plugin/http_api.md), relative to this module
// so the tab works under any TensorBoard path prefix. Findings come written in the tab's language
// (`?lang=`): their text is the server's message catalogue, never translated here.

import {lang} from './i18n';

import type {Kind, REPORT_VERSION, Severity, Status} from './generated/contract';

// The report's vocabulary comes from tb_health_plugin/contract.py (generated at build time).
export type {Kind, Severity, Status};

export interface Finding {
  kind: Kind;
  severity: Severity;
  step: number;
  end_step?: number;
  tag: string;
  message: string;
  evidence?: Record<string, unknown>;
  advice?: string;
}

export interface RunSummary {
  run: string;
  job: string | null;
  status: Status;
  counts: Record<Severity, number>;
  worst: {kind: Kind; severity: Severity; step: number; message: string} | null;
  kinds: string[];
  steps: {first: number; last: number} | null;
  last_update: number | null;
  signals: Record<string, string>;
  /** `mindspore` when read from MindSpore summary files, which TensorBoard's Scalars tab cannot show. */
  source?: 'tfevents' | 'mindspore' | null;
  /** Under triage only: `online` when this rank's verdict is its own online analysis's, trusted. */
  analysis?: 'full' | 'online';
  analysis_reason?: string;
}

/** A job's roll-up over its ranks (jobs of two ranks or more), computed by the server. */
export interface JobSummary extends RunSummary {
  ranks: string[];
  /** Under triage only: which ranks were analysed in full, which trusted from their online verdict. */
  triage?: {full: string[]; online: string[]};
}

/** Why the logdir could not be read whole (object storage failing); the runs read before stay listed. */
export interface StorageProblem {
  message: string;
  failures: number;
  retry_in_s: number;
}

/** Runs whose analysis is not current yet (never analysed, or newer data being analysed). */
export interface AnalysisStatus {
  state: 'analysing' | 'idle';
  done: number;
  total: number;
}

/** The server's analysis worker was restarted (or is being): the runs analysed before stay listed. */
export interface WorkerNotice {
  state: 'restarting' | 'running';
  restarts: number;
  exit_code: number | null;
}

export interface RunsResponse {
  logdir: string;
  /** The language the findings are written in, and every finding kind's name in it. */
  language: string;
  kinds: Record<string, string>;
  runs: RunSummary[];
  jobs: JobSummary[];
  /** The logdir's tb-health.toml, as the CLI reads it too. */
  config: {file: string | null; tags: Record<string, string>; error: string | null} | null;
  storage?: StorageProblem | null;
  analysis?: AnalysisStatus;
  worker?: WorkerNotice | null;
}

export interface RunReport {
  run: string;
  status: Status;
  steps: {first: number; last: number} | null;
  findings: Finding[];
}

export interface ReportResponse {
  version: typeof REPORT_VERSION;
  logdir: string;
  language: string;
  runs: RunReport[];
}

export interface TagsResponse {
  run: string;
  scalars: string[];
  histograms: string[];
  signals: Record<string, string>;
  per_parameter: Record<string, Record<string, string>>;
}

export interface SeriesResponse {
  run: string;
  tag: string;
  total_points: number;
  downsampled: boolean;
  steps: number[];
  min: (number | null)[];
  max: (number | null)[];
  mean: (number | null)[];
  nonfinite: {step: number; value: string}[];
  nonfinite_total?: number;
  /** What `steps` count: training steps, or samples seen for MindFormers' `... vs samples` tags. */
  x_axis?: 'step' | 'samples';
  /** Wall time (s) of each bucket's first point, and of the series' first point. */
  wall_times?: number[];
  first_wall_time?: number | null;
}

export interface HeatmapResponse {
  run: string;
  layers: string[];
  tags: string[];
  steps: number[];
  values: (number | null)[][];
  end_step: number | null;
  downsampled: boolean;
}

export interface Range {
  start: number;
  end: number;
}

const BASE = new URL('./', import.meta.url);

/** The health report (one self-contained HTML file) of `runs`, as `tb-health report` writes it. */
export function exportUrl(runs: string[], lang: string, format: 'html' | 'md' = 'html'): string {
  const url = new URL('export', BASE);
  url.searchParams.set('format', format);
  url.searchParams.set('lang', lang);
  for (const run of runs) url.searchParams.append('run', run);
  return url.toString();
}

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

async function getJson<T>(route: string, params: Record<string, string | number | undefined>, signal?: AbortSignal): Promise<T> {
  const url = new URL(route, BASE);
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined) url.searchParams.set(name, String(value));
  }
  const response = await fetch(url, {signal, headers: {Accept: 'application/json'}});
  if (!response.ok) {
    // TensorBoard answers a plugin's errors with their message as plain text
    const text = (await response.text().catch(() => '')).trim();
    const message = text || `${response.status} ${response.statusText}`;
    throw new HttpError(response.status, message);
  }
  return (await response.json()) as T;
}

function rangeParams(range?: Range | null): {start?: number; end?: number} {
  return range ? {start: Math.floor(range.start), end: Math.ceil(range.end)} : {};
}

export const api = {
  /** TensorBoard's own run list, in its order (for its run colours). */
  tensorboardRuns: (signal?: AbortSignal) => getJson<string[]>('../../runs', {}, signal),
  runs: (signal?: AbortSignal) => getJson<RunsResponse>('runs', {lang: lang()}, signal),
  report: (run: string, signal?: AbortSignal) => getJson<ReportResponse>('report', {run, lang: lang()}, signal),
  tags: (run: string, signal?: AbortSignal) => getJson<TagsResponse>('tags', {run}, signal),
  series: (run: string, tag: string, width: number, range?: Range | null, signal?: AbortSignal) =>
    getJson<SeriesResponse>('series', {run, tag, width: Math.round(width), ...rangeParams(range)}, signal),
  heatmap: (run: string, width: number, range?: Range | null, signal?: AbortSignal) =>
    getJson<HeatmapResponse>('heatmap', {run, width: Math.round(width), ...rangeParams(range)}, signal),
};

export function isAbort(error: unknown): boolean {
  return error instanceof DOMException && error.name === 'AbortError';
}
