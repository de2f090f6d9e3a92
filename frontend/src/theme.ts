// Light or dark, as TensorBoard is: inside TensorBoard the host page's body carries `dark-mode`
// (the plugin iframe is same-origin, so we read it and watch it change); opened on its own, the
// tab follows the system's `prefers-color-scheme`. The choice lands on <html data-theme>, which the
// stylesheet's colour variables follow; charts read the same variables when they draw.

export type Theme = 'light' | 'dark';

const listeners = new Set<(theme: Theme) => void>();
const systemDark = window.matchMedia?.('(prefers-color-scheme: dark)');

function hostBody(): HTMLElement | null {
  try {
    return window.parent !== window ? window.parent.document.body : null;
  } catch {
    return null; // a cross-origin host: fall back to the system preference
  }
}

function detect(): Theme {
  const body = hostBody();
  if (body) return body.classList.contains('dark-mode') ? 'dark' : 'light';
  return systemDark?.matches ? 'dark' : 'light';
}

export function theme(): Theme {
  return document.documentElement.dataset.theme === 'dark' ? 'dark' : 'light';
}

function apply(): void {
  const next = detect();
  if (document.documentElement.dataset.theme === next) return;
  document.documentElement.dataset.theme = next;
  document.documentElement.style.colorScheme = next;
  for (const listener of listeners) listener(next);
}

/** Applies the theme now and follows the host's or the system's changes. */
export function followTheme(): void {
  apply();
  const body = hostBody();
  if (body) new MutationObserver(apply).observe(body, {attributes: true, attributeFilter: ['class']});
  else systemDark?.addEventListener?.('change', apply);
}

export function onTheme(listener: (theme: Theme) => void): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** A colour from the stylesheet's variables, for canvas drawing. */
export function cssColor(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}
