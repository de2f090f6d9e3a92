"""Notifications: new warning and critical findings sent to a chat robot, a webhook or e-mail.

`alerts` turns findings into per-job alerts and messages, `formats` writes each service's body
and signature, `sinks` configures and delivers, `notifier` sends from a background thread with
rate limits and retries. Used by the hooks (`HealthMonitor(..., notify=[...])`) and by
`tb-health watch`.
"""

from tb_health_plugin.notify.alerts import Alert, JobDeduplicator, alerts_from_report, compose
from tb_health_plugin.notify.notifier import Notifier
from tb_health_plugin.notify.sinks import SINK_KINDS, ConfigError, Sink, sinks_from_config

__all__ = ["Alert", "ConfigError", "JobDeduplicator", "Notifier", "SINK_KINDS", "Sink", "alerts_from_report",
           "compose", "sinks_from_config"]
