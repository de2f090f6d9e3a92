// Typed access to the plugin's routes (tb_health_plugin/http_api.md), relative to this module
// so the tab works under any TensorBoard path prefix. Findings come written in the tab's language
// (`?lang=`): their text is the server's message catalogue, never translated here.

import {lang} from './i18n';

export type Status = 'healthy' | 'warning' | 'critical' | 'no_data';
export type Severity = 'info' | 'warning' | 'critical';

export interface Finding {
  kind: string;
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
  worst: {kind: string; severity: Severity; step: number; message: string} | null;
  kinds: string[];
  steps: {first: number; last: number} | null;
  last_update: number | null;
  signals: Record<string, string>;
  /** `mindspore` when read from MindSpore summary files, which TensorBoard's Scalars tab cannot show. */
  source?: 'tfevents' | 'mindspore' | null;
}

export interface RunsResponse {
  logdir: string;
  /** The language the findings are written in, and every finding kind's name in it. */
  language: string;
  kinds: Record<string, string>;
  runs: RunSummary[];
}

export interface RunReport {
  run: string;
  status: Status;
  steps: {first: number; last: number} | null;
  findings: Finding[];
}

export interface ReportResponse {
  version: number;
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
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = await response.json();
      if (body && typeof body.error === 'string') message = body.error;
    } catch {
      // keep the status line
    }
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
