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
