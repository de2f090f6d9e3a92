// Entry point TensorBoard imports inside the tab's iframe: it calls `render()`.

import 'uplot/dist/uPlot.min.css';
import './styles.css';

import {App} from './app';

function loadStylesheet(): Promise<void> {
  const href = new URL('./index.css', import.meta.url).href;
  if (document.querySelector(`link[href="${href}"]`)) return Promise.resolve();
  return new Promise((resolve) => {
    const link = document.createElement('link');
    link.rel = 'stylesheet';
    link.href = href;
    link.onload = () => resolve();
    link.onerror = () => resolve(); // unstyled beats blank
    document.head.append(link);
  });
}

export async function render(): Promise<void> {
  await loadStylesheet();
  const host = document.createElement('div');
  host.id = 'tb-health';
  document.body.replaceChildren(host);
  new App(host).mount();
}
