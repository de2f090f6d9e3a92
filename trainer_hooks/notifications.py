"""The hooks' notifications: the online analysis's new findings sent while training runs.

Every rank analyses itself, so in a job of N ranks the same divergence is found N times. One
message per finding per job: before sending, a rank claims the event in the job's log folder
(`.tb-health-notified/`, a file created with O_EXCL, which one process wins), so the first
rank that sees it speaks for the job. The event's claim key is its kind, tag and a step bucket
of `BUCKET_WINDOWS` logging windows; the neighbouring buckets are checked too, since ranks
place one event a window or two apart. Ranks on machines that do not share the log folder each
claim on their own disk: there, set `notify` on one rank only (e.g. rank 0) or use
`tb-health watch` on the gathered logs.

Sending never blocks or breaks the training step (`Notifier` sends from its own thread).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence

from tb_health_plugin.contract import SEVERITY_RANK, job_of, rank_of

logger = logging.getLogger("trainer_hooks")

CLAIMS_FOLDER = ".tb-health-notified"
BUCKET_WINDOWS = 10  # logging windows per claim bucket


class JobClaims:
    """First-come claims of events, shared by the ranks writing under one job folder."""

    def __init__(self, job_dir: str, bucket_steps: int) -> None:
        self.folder = os.path.join(job_dir, CLAIMS_FOLDER)
        self.bucket_steps = max(int(bucket_steps), 1)

    def claim(self, kind: str, tag: str, step: int) -> bool:
        """True if this process is the first to claim the event (or claims cannot be kept)."""
        bucket = int(step) // self.bucket_steps
        paths = [self._path(kind, tag, b) for b in (bucket - 1, bucket, bucket + 1)]
        try:
            os.makedirs(self.folder, exist_ok=True)
            if os.path.exists(paths[0]) or os.path.exists(paths[2]):
                return False
            descriptor = os.open(paths[1], os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.close(descriptor)
            return True
        except FileExistsError:
            return False
        except OSError:  # a read-only or vanished folder: better a repeated message than none
            return True

    def _path(self, kind: str, tag: str, bucket: int) -> str:
        digest = hashlib.sha1(f"{kind}\0{tag}\0{bucket}".encode()).hexdigest()[:20]
        return os.path.join(self.folder, digest)


def findings_notifier(
    sinks: Sequence[str],
    run_name: str,
    job_dir: str,
    collect_freq: int,
    config_file: str | None = None,
    lang: str = "en",
    tensorboard_url: str | None = None,
    min_severity: str = "warning",
) -> tuple[Callable[[list[dict]], None], Callable[[], None]]:
    """(send new findings, close): `send` takes the online analysis's new finding dicts.

    Raises `tb_health_plugin.notify.ConfigError` at start-up when a sink lacks its settings,
    so a misconfigured job says so before it trains rather than on its first finding.
    """
    from tb_health_plugin.notify import Alert, Notifier, sinks_from_config
    from tb_health_plugin.notify.alerts import health_tab_link

    notifier = Notifier(sinks_from_config(list(sinks), config_file=config_file), lang=lang)
    claims = JobClaims(job_dir, BUCKET_WINDOWS * collect_freq)
    floor = SEVERITY_RANK[min_severity]
    job = job_of(run_name) or run_name
    rank = rank_of(run_name)

    def send(findings: list[dict]) -> None:
        try:
            alerts = []
            for finding in findings:
                if SEVERITY_RANK.get(finding.get("severity"), 0) < floor:
                    continue
                if (finding.get("evidence") or {}).get("part_of"):
                    continue
                step, tag, kind = int(finding.get("step", 0)), str(finding.get("tag", "")), str(finding.get("kind"))
                if not claims.claim(kind, tag, step):
                    continue  # another rank of the job already spoke for it
                alerts.append(Alert(job=job, run=run_name, rank=rank, kind=kind, severity=finding["severity"],
                                    step=step, tag=tag, text=str(finding.get("message", "")),
                                    link=health_tab_link(tensorboard_url, run_name)))
            notifier.submit(alerts)
        except Exception as error:  # never into the training loop
            logger.warning("tb-health: notification skipped: %s: %s", type(error).__name__, error)

    return send, notifier.close

