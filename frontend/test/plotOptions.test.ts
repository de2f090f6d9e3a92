import type uPlot from 'uplot';
import {afterEach, describe, expect, it, vi} from 'vitest';

import type {Range} from '../src/api';
import {ChartGroup, type GroupMember} from '../src/chartGroup';
import {formatTick, groupHooks, groupPlotOptions, plotWidth, xRange} from '../src/plotOptions';
import {settings, updateSettings} from '../src/settings';
import {Timeline} from '../src/xaxis';

const defaults = {...settings};
afterEach(() => updateSettings(defaults));

/** A chart's first hook of a kind, to call as uPlot would. */
function first(hooks: unknown): (...args: unknown[]) => void {
  return (hooks as ((...args: unknown[]) => void)[])[0];
}

type RangeFn = (u: uPlot, min: number | null, max: number | null, key: string) => uPlot.Range.MinMax;

function member(): GroupMember & {ranges: Range[]; reloads: number} {
  return {
    ranges: [],
    reloads: 0,
    ready: true,
    applyRange(range) {
      this.ranges.push(range);
    },
    async reload() {
      this.reloads++;
    },
    rebuild() {},
    redraw() {},
    destroy() {},
  };
}

function body(width: number): HTMLElement {
  const node = document.createElement('div');
  Object.defineProperty(node, 'clientWidth', {value: width});
  return node;
}

describe('groupPlotOptions', () => {
  const draw = () => {};

  it('shares the group cursor and x scale, and draws a log or linear value axis', () => {
    const group = new ChartGroup();
    const options = groupPlotOptions({group, root: document.createElement('div'), body: body(640), height: 170, series: [{label: 'mean'}], y: {log: true, values: () => []}, draw});
    expect(options.width).toBe(640);
    expect(options.height).toBe(170);
    expect(options.cursor?.sync?.key).toBe(group.syncKey);
    expect(options.cursor?.drag).toEqual({x: true, y: false, setScale: false});
    expect(options.scales?.y?.distr).toBe(3);
    expect(options.scales?.x?.time).toBe(false);
    expect(options.series.map((s) => s.label)).toEqual(['Step', 'mean']);
    expect(options.axes).toHaveLength(2);
    expect(options.hooks?.draw).toEqual([draw]);
    expect(options.hooks?.setSelect).toHaveLength(1);
    expect(options.legend?.show).toBe(true);

    const linear = groupPlotOptions({group, root: document.createElement('div'), body: body(0), height: 100, series: [], y: {log: false, values: () => []}, draw});
    expect(linear.scales?.y?.distr).toBe(1);
    expect(linear.width).toBe(600); // not laid out yet
  });

  it('uses uPlot time ticks on the wall-time axis only', () => {
    updateSettings({xAxis: 'wall'});
    const options = groupPlotOptions({group: new ChartGroup(), root: document.createElement('div'), body: body(500), height: 100, series: [], draw});
    expect(options.scales?.x?.time).toBe(true);
    expect(options.axes?.[0].values).toBeUndefined();
    expect(options.series[0].label).toBe('Wall time');
  });

  it('takes other scales, a custom left axis and extra hooks (the heatmap)', () => {
    const setCursor = () => {};
    const axis = {scale: 'layer'};
    const options = groupPlotOptions({
      group: new ChartGroup(),
      root: document.createElement('div'),
      body: body(500),
      height: 200,
      legend: false,
      cursorPoints: false,
      scales: {layer: {auto: false}},
      yAxis: axis,
      series: [{scale: 'layer'}],
      draw,
      hooks: {setCursor: [setCursor]},
    });
    expect(Object.keys(options.scales ?? {})).toEqual(['x', 'layer']);
    expect(options.axes?.[1]).toBe(axis);
    expect(options.cursor?.points).toEqual({show: false});
    expect(options.legend?.show).toBe(false);
    expect(options.hooks?.setCursor).toEqual([setCursor]);
    expect(options.hooks?.draw).toEqual([draw]);
  });
});

describe('group hooks and x range', () => {
  it('turn a drag into a group zoom and mirror the drawn ranges on the card', () => {
    const group = new ChartGroup();
    const zoom = vi.spyOn(group, 'zoomToX');
    const root = document.createElement('div');
    const hooks = groupHooks(group, root);
    const u = {
      select: {left: 100, width: 50},
      posToVal: (px: number) => px * 2,
      setSelect: vi.fn(),
      scales: {x: {min: 10.4, max: 99.6}, y: {min: 0.5, max: 3}},
    } as unknown as uPlot;
    first(hooks.setSelect)(u);
    expect(zoom).toHaveBeenCalledWith({start: 200, end: 300});
    first(hooks.setScale)(u, 'x');
    first(hooks.setScale)(u, 'y');
    expect(root.dataset).toMatchObject({xmin: '10', xmax: '100', ymin: '0.5', ymax: '3'});
  });

  it('ignores a click that is no drag', () => {
    const group = new ChartGroup();
    const zoom = vi.spyOn(group, 'zoomToX');
    first(groupHooks(group, document.createElement('div')).setSelect)({select: {left: 5, width: 3}} as unknown as uPlot);
    expect(zoom).not.toHaveBeenCalled();
  });

  it("shows the group's range, else the data's, with a width even for one point", () => {
    const group = new ChartGroup();
    const range = xRange(group) as RangeFn;
    const u = {} as uPlot;
    expect(range(u, 3, 9, 'x')).toEqual([3, 9]);
    expect(range(u, 5, 5, 'x')).toEqual([4, 6]);
    expect(range(u, null, null, 'x')).toEqual([0, 1]);
    group.extent = {start: 0, end: 1000};
    expect(range(u, 3, 9, 'x')).toEqual([0, 1000]);
    group.zoom = {start: 100, end: 200};
    expect(range(u, 3, 9, 'x')).toEqual([100, 200]);
  });
});

describe('ChartGroup', () => {
  it('zooms every member and reloads it for the new range', async () => {
    const group = new ChartGroup();
    const [a, b] = [member(), member()];
    group.add(a);
    group.add(b);
    const heard: (Range | null)[] = [];
    group.onZoom((zoom) => heard.push(zoom));
    group.zoomTo({start: 10, end: 20});
    await Promise.resolve();
    expect(a.ranges).toEqual([{start: 10, end: 20}]);
    expect(b.reloads).toBe(1);
    expect(heard).toEqual([{start: 10, end: 20}]);
    expect(group.requestRange()).toEqual({start: 10, end: 20});
    group.zoomTo({start: 20, end: 20}); // empty: ignored
    group.zoomTo({start: 30, end: 25});
    expect(group.zoom).toEqual({start: 10, end: 20});
  });

  it('maps zooms through the timeline on a time axis, and zooms locally without one', () => {
    updateSettings({xAxis: 'relative'});
    const group = new ChartGroup();
    expect(group.zoomInSteps()).toBe(false);
    group.zoomToX({start: 5, end: 15});
    expect(group.requestRange()).toBeNull(); // the compare view: seconds, local
    group.timeline = new Timeline([0, 10, 20], [100, 110, 130], 100);
    expect(group.zoomInSteps()).toBe(true);
    group.zoomToX({start: 5, end: 20}); // seconds since the start
    expect(group.zoom).toEqual({start: 5, end: 15});
    expect(group.visibleX()).toEqual({start: 5, end: 20});
  });

  it('widens a run of one step', () => {
    const group = new ChartGroup();
    group.extent = {start: 7, end: 7};
    expect(group.visible()).toEqual({start: 6, end: 8});
  });

  it('says when every member is ready', () => {
    const group = new ChartGroup();
    const [a, b] = [member(), member()];
    (b as {ready: boolean}).ready = false;
    group.add(a);
    group.add(b);
    const ready = vi.fn();
    group.onAllReady(ready);
    group.memberReady();
    expect(ready).not.toHaveBeenCalled();
    (b as {ready: boolean}).ready = true;
    group.memberReady();
    expect(ready).toHaveBeenCalledTimes(1);
  });
});

describe('formatTick and plotWidth', () => {
  it('keep ticks short', () => {
    expect(formatTick(0.0005)).toBe('5e-4');
    expect(formatTick(1.5e15)).toBe('1.5e+15');
    expect(formatTick(123.456)).toBe('123.5');
    expect(formatTick(0)).toBe('0');
  });

  it('requests one bucket per pixel, within bounds', () => {
    expect(plotWidth(body(640.4))).toBe(640);
    expect(plotWidth(body(20))).toBe(100);
    expect(plotWidth(body(9000))).toBe(4000);
    expect(plotWidth(body(0))).toBe(600);
  });
});
