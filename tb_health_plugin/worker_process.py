"""The worker process: reads and analyses the logdir outside TensorBoard's interpreter.

    python -m tb_health_plugin.worker_process FD LOGDIR REFRESH_INTERVAL_S

Started by `worker.WorkerService` with one end of a socket pair as file descriptor FD. It runs the
plugin's in-process data layer (`service.HealthService`: reader, background refresher, analysis
cache) and speaks a small protocol of pickled tuples (`multiprocessing.connection` framing):

- to the plugin, unasked: `("listing", {...})` after every refresh (the run names, each changed
  run's tags, roles, newest wall time and source format, the logdir's config and the store's
  state), and `("reports", {run: {"version", "report"}})` after every analysis of a unit: the
  reports as analysed (findings as `Event`s, no points), so what crosses is small; and, during
  its first read of the logdir, `("reading", {"runs_read", "runs_found"})` twice a second;
- asked by the plugin: `("call", id, method, args)`, answered by `("reply", id, ok, result)`,
  for what needs the points (`series`, `heatmap`, `health_report`) or a report not sent yet.

Before anything heavy is imported or read, it lists the logdir's runs (names only, a `listing`
with `"partial": true`): a run of millions of points is listed while it is being read, and the
tab shows it pending rather than nothing.

It exits when the plugin's end of the socket closes: TensorBoard exiting, however it exits
(even killed), leaves no worker behind.
"""

from __future__ import annotations

import logging
import signal
import sys
from multiprocessing.connection import Connection

from tb_health_plugin.readers.discovery import FORMATS, discover_runs
from tb_health_plugin.readers.storage import storage_for

logger = logging.getLogger(__name__)


def send_run_names(conn: Connection, logdir: str) -> None:
    """The runs' names before they are read; nothing if the logdir cannot be listed yet (the
    first full listing will say why)."""
    try:
        names = sorted(discover_runs(logdir, FORMATS, storage_for(logdir)))
    except Exception:  # noqa: BLE001 - the refresher reports a failing store properly
        return
    conn.send(("listing", {"names": names, "changed": {}, "partial": True}))


def main(argv: list[str] | None = None) -> None:
    fd, logdir, refresh_interval_s = argv or sys.argv[1:]
    logging.basicConfig(level=logging.WARNING, format="tb-health worker: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches TensorBoard's whole group: it stops us
    conn = Connection(int(fd))
    send_run_names(conn, logdir)
    from tb_health_plugin.worker_host import WorkerHost  # the analysis: seconds of imports

    WorkerHost(conn, logdir, float(refresh_interval_s)).serve()


if __name__ == "__main__":
    main()
