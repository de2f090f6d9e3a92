import {afterEach, beforeAll, describe, expect, it, vi} from 'vitest';

import {installTooltips, setTip, showTip} from '../src/tooltip';

const tooltip = () => document.querySelector<HTMLElement>('[role="tooltip"]');

function target(text: string | null, box: Partial<DOMRect> = {}): HTMLElement {
  const node = document.createElement('button');
  node.title = 'the browser box';
  setTip(node, text);
  const rect = {left: 100, top: 100, width: 40, height: 20, right: 140, bottom: 120, ...box};
  node.getBoundingClientRect = () => rect as DOMRect;
  document.body.append(node);
  return node;
}

beforeAll(() => installTooltips());
afterEach(() => {
  document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}));
  vi.restoreAllMocks();
  document.body.querySelectorAll('button').forEach((n) => n.remove());
});

describe('setTip', () => {
  it("replaces the browser's title box and can be cleared", () => {
    const node = target('Open in Time Series');
    expect(node.dataset.tip).toBe('Open in Time Series');
    expect(node.hasAttribute('title')).toBe(false);
    setTip(node, '梯度', 'zh');
    expect(node.dataset.tipLang).toBe('zh');
    setTip(node, null);
    expect('tip' in node.dataset).toBe(false);
  });
});

describe('tooltips', () => {
  it('show on hover (also over a child) and on focus, and hide on Escape, scroll or leaving', () => {
    const node = target('What this is');
    const child = document.createElement('span');
    node.append(child);
    child.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
    expect(tooltip()?.hidden).toBe(false);
    expect(tooltip()?.textContent).toBe('What this is');
    document.body.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
    expect(tooltip()?.hidden).toBe(true);
    node.dispatchEvent(new FocusEvent('focusin', {bubbles: true}));
    expect(tooltip()?.hidden).toBe(false);
    document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}));
    expect(tooltip()?.hidden).toBe(true);
    node.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
    document.dispatchEvent(new Event('scroll'));
    expect(tooltip()?.hidden).toBe(true);
  });

  it('carry the language of their text', () => {
    const node = target(null);
    setTip(node, '梯度范数', 'zh');
    showTip(node);
    expect(tooltip()?.lang).toBe('zh');
  });

  it('sit below their element, centred, inside the window and never over the element', () => {
    vi.spyOn(HTMLElement.prototype, 'offsetWidth', 'get').mockReturnValue(120);
    vi.spyOn(HTMLElement.prototype, 'offsetHeight', 'get').mockReturnValue(30);
    const [width, height] = [window.innerWidth, window.innerHeight];

    showTip(target('below', {left: 200, top: 100, width: 40, bottom: 120}));
    expect(tooltip()?.style.left).toBe(`${200 + 20 - 60}px`);
    expect(tooltip()?.style.top).toBe('126px');

    showTip(target('at the right edge', {left: width - 10, top: 100, width: 10, bottom: 120}));
    expect(tooltip()?.style.left).toBe(`${width - 120 - 4}px`);

    showTip(target('at the left edge', {left: 0, top: 100, width: 10, bottom: 120}));
    expect(tooltip()?.style.left).toBe('4px');

    showTip(target('at the bottom', {left: 200, top: height - 20, width: 40, bottom: height - 2}));
    expect(tooltip()?.style.top).toBe(`${height - 20 - 30 - 6}px`);
  });

  it('show nothing for an element without text', () => {
    showTip(target(null));
    expect(tooltip()?.hidden ?? true).toBe(true);
  });
});
