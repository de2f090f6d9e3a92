"""A finding's chart as inline SVG: the series it names, around its step, with its span marked.

Drawn with matplotlib (Agg, no display) so that a report needs no browser script and no network:
text stays text (`svg.fonttype = none`, so Chinese renders with the reader's fonts and the file
stays small) and the output is deterministic (no date, fixed id salt). The y axis is logarithmic
when the positive values shown span more than two decades, as in the Health tab.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

LOG_DECADES = 2.0  # more than this many decades between the smallest and largest value: log axis
CONTEXT_SHARE = 0.15  # of the run's span shown on each side of the finding
CONTEXT_MIN_POINTS = 10  # at least this many logged points on each side
FIGSIZE_IN = (6.4, 2.1)
# Fixed margins (figure fractions): room for 7-character tick labels, the x label, the title and
# an axis offset text such as "1e7". `tight_layout` computed them per chart by drawing it once
# more: half of a chart's CPU time (0.14 s against 0.07 s a chart, medians of 15); fixed, every
# chart's plot area also lines up.
MARGINS = {"left": 0.1, "right": 0.98, "bottom": 0.24, "top": 0.79}


def window(steps: np.ndarray, start: int, end: int) -> slice:
    """The index range of `steps` shown for a finding from `start` to `end`."""
    if steps.size == 0:
        return slice(0, 0)
    span = int(steps[-1] - steps[0]) or 1
    lo_index = int(np.searchsorted(steps, start, side="left"))
    hi_index = int(np.searchsorted(steps, end, side="right"))
    margin_steps = CONTEXT_SHARE * span
    lo = min(int(np.searchsorted(steps, start - margin_steps, side="left")), max(lo_index - CONTEXT_MIN_POINTS, 0))
    hi = max(int(np.searchsorted(steps, end + margin_steps, side="right")), min(hi_index + CONTEXT_MIN_POINTS, steps.size))
    return slice(lo, hi)


@dataclass(frozen=True)
class ChartTask:
    """One chart to draw: the points shown (a few thousand at most, cheap to send to a worker
    process), its tag and the finding's span."""

    x: np.ndarray
    y: np.ndarray
    tag: str
    start: int
    end: int
    step_label: str = "step"

    def draw(self) -> str:
        """The SVG text of the chart, its span shaded."""
        return _svg(self)


def draw_here(tasks: list[ChartTask], on_progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Each chart's SVG, drawn one after the other in this process, `on_progress(done, total)`
    after each. BLAS runs on one thread meanwhile: matplotlib's small products gain nothing from
    OpenBLAS's threads, whose idle spinning cost as much CPU as the drawing itself (9 s of system
    time for 80 charts); a forked worker has no such threads."""
    from threadpoolctl import threadpool_limits

    drawn = []
    with threadpool_limits(limits=1, user_api="blas"):
        for done, task in enumerate(tasks, start=1):
            drawn.append(task.draw())
            if on_progress is not None:
                on_progress(done, len(tasks))
    return drawn


def chart_task(steps: np.ndarray, values: np.ndarray, tag: str, start: int, end: int,
               step_label: str = "step") -> ChartTask:
    """The chart of `tag` around steps `start`..`end`, its points cut to the window shown."""
    shown = window(steps, start, end)
    return ChartTask(np.asarray(steps[shown], dtype=np.float64), np.asarray(values[shown], dtype=np.float64),
                     tag, start, end, step_label)


def _svg(task: ChartTask) -> str:
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    x, y, start, end = task.x, task.y, task.start, task.end
    finite = np.isfinite(y)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tb-health", "font.size": 8}):
        figure = Figure(figsize=FIGSIZE_IN)
        axes = figure.add_subplot()
        axes.plot(x[finite], y[finite], color="#1565c0", linewidth=1.0)
        if (~finite).any():  # NaN/Inf drawn where they happened, on the top edge
            top = np.nanmax(y[finite]) if finite.any() else 1.0
            axes.plot(x[~finite], np.full((~finite).sum(), top), "x", color="#c62828", markersize=4,
                      label="NaN/Inf")
            axes.legend(loc="upper left", frameon=False)
        positive = y[finite & (y > 0)]
        if positive.size and positive.size == finite.sum() and np.log10(positive.max() / positive.min()) > LOG_DECADES:
            axes.set_yscale("log")
        if end > start:
            axes.axvspan(start, end, color="#ef6c00", alpha=0.18, linewidth=0)
        axes.axvline(start, color="#ef6c00", linewidth=1.0)
        axes.set_xlabel(task.step_label)
        axes.set_title(task.tag, loc="left")
        axes.grid(alpha=0.3)
        figure.subplots_adjust(**MARGINS)
        out = io.StringIO()
        figure.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    text = out.getvalue()
    return text[text.index("<svg"):]  # inline: without the XML declaration and doctype
