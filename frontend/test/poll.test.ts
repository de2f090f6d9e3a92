import {afterEach, beforeEach, describe, expect, it, vi} from 'vitest';

import {Poller} from '../src/poll';

/** A task whose runs finish when the test says so. */
function controlledTask() {
  const finishes: (() => void)[] = [];
  let active = 0;
  let mostActive = 0;
  const task = vi.fn(
    () =>
      new Promise<void>((resolve) => {
        active++;
        mostActive = Math.max(mostActive, active);
        finishes.push(() => {
          active--;
          resolve();
        });
      }),
  );
  return {task, finishNext: async () => {
    finishes.shift()?.();
    await vi.advanceTimersByTimeAsync(0);
  }, mostActive: () => mostActive};
}

let hidden = false;
beforeEach(() => {
  vi.useFakeTimers();
  hidden = false;
  Object.defineProperty(document, 'hidden', {configurable: true, get: () => hidden});
});
afterEach(() => {
  vi.useRealTimers();
});

describe('Poller', () => {
  it('runs every interval after the last run ended', async () => {
    const task = vi.fn(async () => {});
    const poller = new Poller(5000, task);
    await poller.now();
    expect(task).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(4999);
    expect(task).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(task).toHaveBeenCalledTimes(2);
    await vi.advanceTimersByTimeAsync(5000);
    expect(task).toHaveBeenCalledTimes(3);
  });

  it('never overlaps itself: a request during a run runs once right after it', async () => {
    const {task, finishNext, mostActive} = controlledTask();
    const poller = new Poller(5000, task);
    void poller.now();
    void poller.now();
    void poller.now();
    expect(task).toHaveBeenCalledTimes(1);
    await finishNext();
    expect(task).toHaveBeenCalledTimes(2); // the requests made meanwhile, as one run
    await finishNext();
    expect(task).toHaveBeenCalledTimes(2);
    expect(mostActive()).toBe(1);
  });

  it('restarts the interval when run early', async () => {
    const task = vi.fn(async () => {});
    const poller = new Poller(5000, task);
    await poller.now();
    await vi.advanceTimersByTimeAsync(3000);
    await poller.now(); // at 3 s: the next periodic run moves to 8 s
    expect(task).toHaveBeenCalledTimes(2);
    await vi.advanceTimersByTimeAsync(4999);
    expect(task).toHaveBeenCalledTimes(2);
    await vi.advanceTimersByTimeAsync(1);
    expect(task).toHaveBeenCalledTimes(3);
  });

  it('skips hidden pages and catches up when the page shows again', async () => {
    const task = vi.fn(async () => {});
    const poller = new Poller(5000, task);
    poller.start();
    await vi.advanceTimersByTimeAsync(0);
    expect(task).toHaveBeenCalledTimes(1);
    hidden = true;
    await vi.advanceTimersByTimeAsync(20000);
    expect(task).toHaveBeenCalledTimes(1);
    hidden = false;
    document.dispatchEvent(new Event('visibilitychange'));
    await vi.advanceTimersByTimeAsync(0);
    expect(task).toHaveBeenCalledTimes(2);
  });

  it('keeps polling after a failed run', async () => {
    let fail = true;
    const task = vi.fn(async () => {
      if (fail) throw new Error('offline');
    });
    const poller = new Poller(5000, task);
    await expect(poller.now()).rejects.toThrow('offline');
    fail = false;
    await vi.advanceTimersByTimeAsync(5000);
    expect(task).toHaveBeenCalledTimes(2);
  });
});
