// Findings as files: CSV (one row per finding, evidence as JSON in its own column, RFC 4180
// quoting, a BOM so spreadsheet programs read UTF-8) and JSON (the report route's objects).

import type {Finding} from './api';

const COLUMNS = ['run', 'kind', 'severity', 'step', 'end_step', 'tag', 'message', 'advice', 'evidence'] as const;

function csvCell(value: unknown): string {
  const text = value === null || value === undefined ? '' : typeof value === 'object' ? JSON.stringify(value) : String(value);
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

export function findingsCsv(run: string, findings: Finding[]): string {
  const rows = findings.map((f) =>
    [run, f.kind, f.severity, f.step, f.end_step ?? '', f.tag, f.message, f.advice ?? f.evidence?.advice ?? '', f.evidence ?? {}].map(csvCell).join(','),
  );
  return `\ufeff${[COLUMNS.join(','), ...rows].join('\r\n')}\r\n`;
}

export function findingsJson(run: string, findings: Finding[]): string {
  return `${JSON.stringify({run, findings}, null, 2)}\n`;
}

/** A file name from the run name: path separators and odd characters become '_'. */
export function fileName(run: string, extension: string): string {
  return `${run.replace(/[^\w.-]+/g, '_').replace(/^\.+/, '') || 'run'}-findings.${extension}`;
}

export function download(name: string, text: string, type: string): void {
  const url = URL.createObjectURL(new Blob([text], {type}));
  const link = document.createElement('a');
  link.href = url;
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  window.setTimeout(() => URL.revokeObjectURL(url), 60_000);
}
