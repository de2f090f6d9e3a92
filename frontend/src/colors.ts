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

/** A run's colour in this tab's charts and tables. */
export function runColor(_run: string, index: number): string {
  return RUN_PALETTE[((index % RUN_PALETTE.length) + RUN_PALETTE.length) % RUN_PALETTE.length];
}
