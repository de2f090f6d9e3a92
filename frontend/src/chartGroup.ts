// Charts of one view share the x axis: one zoom range, one cursor (uPlot's sync key). A zoom
// re-requests every member's data for the new range, so the server re-downsamples the visible
// window from the full data and no spike is lost at any zoom level. Ranges are kept in steps;
// on a relative or wall-time axis the group's Timeline maps them to seconds. A group without a
// timeline (the compare view, whose runs each have their own clock) zooms in seconds, locally.

import type {Range} from './api';
import {settings} from './settings';
import type {Timeline} from './xaxis';

export interface GroupMember {
  /** Show `range` (x units) at once (scales only), before new data arrives. */
  applyRange(range: Range): void;
  /** Fetch data for the group's current range and redraw. */
  reload(): Promise<void>;
  /** Build the chart again (scale or axis kind changed). */
  rebuild(): void;
  /** Redraw with the same data (theme or markers changed). */
  redraw(): void;
  destroy(): void;
  readonly ready: boolean;
}

let groupCounter = 0;

export class ChartGroup {
  readonly syncKey = `tb-health-${++groupCounter}`;
  /** The zoomed range in steps (in seconds for a group on a time axis without a timeline), or null. */
  zoom: Range | null = null;
  /** The run's whole step range (the unzoomed view). */
  extent: Range | null = null;
  /** The run's step -> wall-time map, for the relative and wall-time axes. */
  timeline: Timeline | null = null;
  private readonly members: GroupMember[] = [];
  private readonly zoomListeners: ((zoom: Range | null) => void)[] = [];
  private readonly readyListeners: (() => void)[] = [];

  add(member: GroupMember): void {
    this.members.push(member);
  }

  /** Whether x values are steps mapped through a timeline (false: steps, or local seconds). */
  private mapped(): boolean {
    return settings.xAxis !== 'step' && this.timeline !== null && !this.timeline.empty;
  }

  /** Zoom ranges are server step ranges only on a step axis or through a timeline. */
  zoomInSteps(): boolean {
    return settings.xAxis === 'step' || this.mapped();
  }

  toX(step: number): number {
    return this.mapped() ? (this.timeline as Timeline).toX(step, settings.xAxis) : step;
  }

  toStep(x: number): number {
    return this.mapped() ? (this.timeline as Timeline).toStep(x, settings.xAxis) : x;
  }

  /** The step range every chart shows now. */
  visible(): Range | null {
    const shown = this.zoom ?? (this.zoomInSteps() ? this.extent : null);
    // a run of one step still needs an axis of some width
    return shown && !(shown.end > shown.start) ? {start: shown.start - 1, end: shown.end + 1} : shown;
  }

  /** The same range in x units. */
  visibleX(): Range | null {
    const shown = this.visible();
    if (!shown || !this.mapped()) return shown;
    const [start, end] = [this.toX(shown.start), this.toX(shown.end)];
    return end > start ? {start, end} : {start: start - 1, end: end + 1};
  }

  /** The zoom to request from the server: none when zooming locally. */
  requestRange(): Range | null {
    return this.zoomInSteps() ? this.zoom : null;
  }

  onZoom(listener: (zoom: Range | null) => void): void {
    this.zoomListeners.push(listener);
  }

  onAllReady(listener: () => void): void {
    this.readyListeners.push(listener);
  }

  /** Called by members when they finish drawing. */
  memberReady(): void {
    if (this.members.length && this.members.every((m) => m.ready)) {
      for (const listener of this.readyListeners) listener();
    }
  }

  /** Zoom to a range given in x units (a drag on a chart). */
  zoomToX(range: Range | null): void {
    this.zoomTo(range && {start: this.toStep(range.start), end: this.toStep(range.end)});
  }

  zoomTo(range: Range | null): void {
    if (range && !(range.end > range.start)) return;
    this.zoom = range;
    const shown = this.visibleX();
    if (shown) for (const member of this.members) member.applyRange(shown);
    for (const listener of this.zoomListeners) listener(range);
    void this.reloadAll();
  }

  async reloadAll(): Promise<void> {
    await Promise.all(this.members.map((member) => member.reload()));
  }

  rebuildAll(): void {
    for (const member of this.members) member.rebuild();
  }

  redrawAll(): void {
    for (const member of this.members) member.redraw();
  }

  destroy(): void {
    for (const member of this.members) member.destroy();
    this.members.length = 0;
  }
}
