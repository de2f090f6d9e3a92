// Periodic refresh that skips hidden pages, never overlaps itself and can be triggered early
// (TensorBoard's reload, a button).

export class Poller {
  private timer: number | undefined;
  private running = false;
  private pending = false;

  constructor(
    private readonly intervalMs: number,
    private readonly task: () => Promise<void>,
  ) {}

  start(): void {
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden) void this.now();
    });
    void this.now();
  }

  /** Runs the task now (or right after the one in flight) and restarts the interval. */
  async now(): Promise<void> {
    if (this.running) {
      this.pending = true;
      return;
    }
    window.clearTimeout(this.timer);
    this.running = true;
    try {
      await this.task();
    } finally {
      this.running = false;
      this.timer = window.setTimeout(() => {
        if (!document.hidden) void this.now();
      }, this.intervalMs);
      if (this.pending) {
        this.pending = false;
        void this.now();
      }
    }
  }
}
