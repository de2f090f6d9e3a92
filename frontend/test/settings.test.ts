import {beforeEach, describe, expect, it, vi} from 'vitest';

const KEY = 'tb-health.charts';

/** The settings module as a fresh page load sees it, with `saved` in localStorage. */
async function loadWith(saved: string | null) {
  if (saved === null) localStorage.removeItem(KEY);
  else localStorage.setItem(KEY, saved);
  vi.resetModules();
  return import('../src/settings');
}

beforeEach(() => localStorage.clear());

describe('chart settings', () => {
  it("start as TensorBoard's Scalars tab does", async () => {
    const {settings, DEFAULT_SMOOTHING} = await loadWith(null);
    expect(settings).toEqual({yScale: 'auto', smoothing: DEFAULT_SMOOTHING, ignoreOutliers: false, xAxis: 'step'});
    expect(DEFAULT_SMOOTHING).toBe(0.6);
  });

  it('come back from storage after a reload', async () => {
    const first = await loadWith(null);
    first.updateSettings({yScale: 'log', smoothing: 0.9, ignoreOutliers: true, xAxis: 'relative'});
    const {settings} = await loadWith(localStorage.getItem(KEY));
    expect(settings).toEqual({yScale: 'log', smoothing: 0.9, ignoreOutliers: true, xAxis: 'relative'});
  });

  it('ignore invalid or corrupt saved values field by field', async () => {
    const {settings} = await loadWith(JSON.stringify({yScale: 'cubic', smoothing: 1, ignoreOutliers: 'yes', xAxis: 'wall'}));
    expect(settings).toEqual({yScale: 'auto', smoothing: 0.6, ignoreOutliers: false, xAxis: 'wall'});
    expect((await loadWith(JSON.stringify({smoothing: -0.1}))).settings.smoothing).toBe(0.6);
    expect((await loadWith('{not json')).settings.yScale).toBe('auto');
    expect((await loadWith('42')).settings.xAxis).toBe('step');
  });

  it('tell listeners what changed, once per real change, until they unsubscribe', async () => {
    const {onSettings, updateSettings, settings} = await loadWith(null);
    const changes: string[] = [];
    const unsubscribe = onSettings((changed) => changes.push(changed));
    updateSettings({smoothing: 0.3, yScale: 'auto'}); // yScale is already auto
    expect(changes).toEqual(['smoothing']);
    expect(settings.smoothing).toBe(0.3);
    updateSettings({smoothing: 0.3});
    expect(changes).toEqual(['smoothing']);
    unsubscribe();
    updateSettings({xAxis: 'wall'});
    expect(changes).toEqual(['smoothing']);
    expect(JSON.parse(localStorage.getItem(KEY) ?? '{}').xAxis).toBe('wall');
  });

  it('still work when storage is blocked', async () => {
    const getItem = vi.spyOn(Storage.prototype, 'getItem').mockImplementation(() => {
      throw new DOMException('blocked', 'SecurityError');
    });
    const setItem = vi.spyOn(Storage.prototype, 'setItem').mockImplementation(() => {
      throw new DOMException('blocked', 'SecurityError');
    });
    try {
      vi.resetModules();
      const {settings, updateSettings} = await import('../src/settings');
      expect(settings.yScale).toBe('auto');
      updateSettings({yScale: 'linear'});
      expect(settings.yScale).toBe('linear');
    } finally {
      getItem.mockRestore();
      setItem.mockRestore();
    }
  });
});
