// Colours: severities, statuses, run palette and the heatmap's perceptual colour ramp.

export const SEVERITY_COLORS: Record<string, string> = {
  critical: '#d93025',
  warning: '#e8a317',
  info: '#5f84c4',
};

export const RUN_PALETTE = [
  '#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd',
  '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf',
];

// Viridis sampled at 9 points (a perceptually uniform ramp from dark purple to yellow).
const RAMP: [number, number, number][] = [
  [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
];

/** The ramp colour at `t` in [0, 1]. */
export function rampColor(t: number): string {
  const x = Math.min(1, Math.max(0, t)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  const [a, b] = [RAMP[i], RAMP[i + 1]];
  const mix = (k: number) => Math.round(a[k] + (b[k] - a[k]) * f);
  return `rgb(${mix(0)},${mix(1)},${mix(2)})`;
}

export function rampGradientCss(): string {
  return `linear-gradient(to right, ${RAMP.map(([r, g, b]) => `rgb(${r},${g},${b})`).join(', ')})`;
}

/** TensorBoard's default run palette (its settings' "Default" palette: light and dark hex). */
const TB_PALETTE: [string, string][] = [
  ['#425066', '#8e98a3'], ['#12b5cb', '#12b5cb'], ['#e52592', '#e52592'], ['#f9ab00', '#f9ab00'],
  ['#9334e6', '#9334e6'], ['#7cb342', '#7cb342'], ['#e8710a', '#e8710a'],
];

/** Runs in the order TensorBoard lists them (`/data/runs`): it colours run i with palette[i % 7],
 * keeping a run's colour once given, so new runs only append. */
const tbOrder = new Map<string, number>();

export function setTensorBoardRuns(runs: string[]): void {
  for (const run of runs) if (!tbOrder.has(run)) tbOrder.set(run, tbOrder.size);
}

/** A run's colour: TensorBoard's for the same run when it lists it, else from our palette. */
export function runColor(run: string, index: number): string {
  const order = tbOrder.get(run);
  if (order !== undefined) {
    const dark = document.documentElement.dataset.theme === 'dark';
    return TB_PALETTE[order % TB_PALETTE.length][dark ? 1 : 0];
  }
  return RUN_PALETTE[((index % RUN_PALETTE.length) + RUN_PALETTE.length) % RUN_PALETTE.length];
}
