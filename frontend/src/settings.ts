// The chart settings the Scalars tab offers, shared by the run and compare views and kept in
// localStorage: y scale, smoothing, "ignore outliers in chart scaling" and the x axis.

export type YScale = 'auto' | 'log' | 'linear';
export type XAxis = 'step' | 'relative' | 'wall';

export interface ChartSettings {
  yScale: YScale;
  /** TensorBoard's smoothing weight, 0 (raw) to 0.999. */
  smoothing: number;
  ignoreOutliers: boolean;
  xAxis: XAxis;
}

const STORAGE_KEY = 'tb-health.charts';
/** TensorBoard's Scalars tab opens with 0.6. */
export const DEFAULT_SMOOTHING = 0.6;

function load(): ChartSettings {
  const settings: ChartSettings = {yScale: 'auto', smoothing: DEFAULT_SMOOTHING, ignoreOutliers: false, xAxis: 'step'};
  try {
    const saved = JSON.parse(localStorage.getItem(STORAGE_KEY) ?? 'null');
    if (saved && typeof saved === 'object') {
      if (['auto', 'log', 'linear'].includes(saved.yScale)) settings.yScale = saved.yScale;
      if (typeof saved.smoothing === 'number' && saved.smoothing >= 0 && saved.smoothing < 1) settings.smoothing = saved.smoothing;
      if (typeof saved.ignoreOutliers === 'boolean') settings.ignoreOutliers = saved.ignoreOutliers;
      if (['step', 'relative', 'wall'].includes(saved.xAxis)) settings.xAxis = saved.xAxis;
    }
  } catch {
    // storage blocked or corrupt: defaults
  }
  return settings;
}

export const settings: ChartSettings = load();
const listeners = new Set<(changed: keyof ChartSettings) => void>();

export function updateSettings(patch: Partial<ChartSettings>): void {
  for (const [key, value] of Object.entries(patch) as [keyof ChartSettings, never][]) {
    if (settings[key] === value) continue;
    settings[key] = value;
    try {
      localStorage.setItem(STORAGE_KEY, JSON.stringify(settings));
    } catch {
      // not persisted
    }
    for (const listener of listeners) listener(key);
  }
}

/** Calls `listener` on every change; returns the unsubscribe function. */
export function onSettings(listener: (changed: keyof ChartSettings) => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}
