// Number, step and time formatting shared by the views.

export function formatNumber(value: number | null | undefined): string {
  if (value === null || value === undefined) return '—';
  if (!Number.isFinite(value)) return String(value);
  const magnitude = Math.abs(value);
  if (magnitude !== 0 && (magnitude >= 1e5 || magnitude < 1e-3)) return value.toExponential(2);
  return Number(value.toPrecision(4)).toString();
}

export function formatStep(step: number | null | undefined): string {
  if (step === null || step === undefined) return '—';
  return Math.round(step).toLocaleString('en-US');
}

/** Seconds since `epochSeconds`, as a short relative phrase via the given unit labels. */
export function ageSeconds(epochSeconds: number | null | undefined, nowMs = Date.now()): number | null {
  if (epochSeconds === null || epochSeconds === undefined) return null;
  return Math.max(0, nowMs / 1000 - epochSeconds);
}

// Control characters and bidirectional controls: U+202E makes "rtl\u202egnp.exe" read "rtlexe.png".
// eslint-disable-next-line no-control-regex
const HIDDEN_CHARACTERS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** A name from the logs (anyone can name a run folder) with its invisible or reordering
 * characters shown as visible `[U+202E]` marks, for display only (routes use the raw name). */
export function visibleName(name: string): string {
  return name.replace(HIDDEN_CHARACTERS, (c) => `[U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}]`);
}
