// Charts of one view share the step axis: one zoom range, one cursor (uPlot's sync key). A zoom
// re-requests every member's data for the new range, so the server re-downsamples the visible
// window from the full data and no spike is lost at any zoom level.

import type {Range} from './api';

export interface GroupMember {
  /** Show `range` at once (scales only), before new data arrives. */
  applyRange(range: Range): void;
  /** Fetch data for the group's current range and redraw. */
  reload(): Promise<void>;
  destroy(): void;
  readonly ready: boolean;
}

let groupCounter = 0;

export class ChartGroup {
  readonly syncKey = `tb-health-${++groupCounter}`;
  /** The zoomed range, or null for the whole run. */
  zoom: Range | null = null;
  /** The run's whole step range (the unzoomed view). */
  extent: Range | null = null;
  private readonly members: GroupMember[] = [];
  private readonly zoomListeners: ((zoom: Range | null) => void)[] = [];
  private readonly readyListeners: (() => void)[] = [];

  add(member: GroupMember): void {
    this.members.push(member);
  }

  /** The range every chart shows now. */
  visible(): Range | null {
    const shown = this.zoom ?? this.extent;
    // a run of one step still needs an axis of some width
    return shown && !(shown.end > shown.start) ? {start: shown.start - 1, end: shown.end + 1} : shown;
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

  zoomTo(range: Range | null): void {
    if (range && !(range.end > range.start)) return;
    this.zoom = range;
    const shown = this.visible();
    if (shown) for (const member of this.members) member.applyRange(shown);
    for (const listener of this.zoomListeners) listener(range);
    void this.reloadAll();
  }

  async reloadAll(): Promise<void> {
    await Promise.all(this.members.map((member) => member.reload()));
  }

  destroy(): void {
    for (const member of this.members) member.destroy();
    this.members.length = 0;
  }
}
