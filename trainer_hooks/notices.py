"""What the hooks tell the user, in the logs and on the console: notes about what cannot be
logged (each once), problems with what the training passed (each kind once), and findings."""

from __future__ import annotations

import json
import logging
import warnings

from tb_health_plugin import contract
from trainer_hooks.writer import SafeEventWriter

logger = logging.getLogger("trainer_hooks")


class Notices:
    def __init__(self, writer: SafeEventWriter) -> None:
        self.writer = writer
        self._notes: set[str] = set()
        self._input_errors: set[tuple[str, str]] = set()

    def note(self, step: int, message: str) -> None:
        """Say once, in the logs (`health/notes`) and on the console, what cannot be logged."""
        if message in self._notes:
            return
        self._notes.add(message)
        logger.info("tb-health: %s", message)
        self.writer.text(contract.NOTES, message, step)

    def input_error(self, where: str, step: int, error: Exception) -> None:
        """Warn once per kind of problem in what the training passed (its call is skipped);
        the warning points at the training's call of the hook."""
        key = (where, type(error).__name__)
        if key in self._input_errors:
            return
        self._input_errors.add(key)
        message = (
            f"tb-health: {where} at step {step} skipped: {type(error).__name__}: {error} "
            "(later calls with the same problem are skipped silently; training continues)"
        )
        logger.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    def stopping(self, step: int, loss: float, grad_norm: float | None) -> None:
        message = (
            f"non-finite training values at step {step} (loss {loss}, gradient norm {grad_norm}); "
            "stopping at this step (stop_on_critical=True)"
        )
        logger.error("tb-health: %s", message)
        self.writer.text(contract.NOTES, message, step)
        self.writer.flush()

    def findings(self, findings: list[dict]) -> bool:
        """Write each finding as `health/findings` JSON text and print it; whether any is critical."""
        critical = False
        for finding in findings:
            self.writer.text(contract.FINDINGS, json.dumps(finding, sort_keys=True), int(finding.get("step", 0)))
            level = logging.ERROR if finding.get("severity") == "critical" else logging.WARNING
            logger.log(
                level,
                "tb-health [%s] %s at step %s (%s): %s",
                finding.get("severity"),
                finding.get("kind"),
                finding.get("step"),
                finding.get("tag"),
                finding.get("message"),
            )
            critical = critical or finding.get("severity") == "critical"
        self.writer.flush()
        return critical
