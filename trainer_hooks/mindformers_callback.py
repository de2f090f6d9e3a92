"""`HealthMonitor` for MindFormers: a registered callback reading what `MFTrainOneStepCell` returns.

Importing this module registers the callback with `MindFormerRegister` under the names
`HealthMonitor` and `MindFormersHealthMonitor`, so a YAML entry enables it:

    callbacks:
      - type: HealthMonitor
        log_dir: ./health_logs
        collect_freq: 10

`MFTrainOneStepCell` already computes, inside the step, the learning rate used, the loss scale,
the overflow flag, the global gradient norm (with `use_clip_grad: True`) and, with
`local_norm: True`, each gradient's squared norm; this callback logs them under the project's
tags (no second norm computation).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mindformers.tools.register import MindFormerModuleType, MindFormerRegister

from trainer_hooks.monitor import HealthMonitor
from trainer_hooks.values import to_numpy

REGISTERED_NAMES = ("HealthMonitor", "MindFormersHealthMonitor")
NO_NORM_NOTE = (
    "MFTrainOneStepCell returns no gradient norm with use_clip_grad=False and local_norm=False: "
    "set runner_wrapper use_clip_grad: True (global norm) or local_norm: True (per parameter) to log them."
)


class MindFormersHealthMonitor(HealthMonitor):
    """`HealthMonitor` reading MindFormers' training-cell outputs; same options (`HealthOptions`)."""

    def step_values(self, cb_params, step: int, steps_done: int = 1) -> dict[str, Any]:
        outputs = cb_params.net_outputs
        if not isinstance(outputs, (tuple, list)) or len(outputs) not in (3, 4, 5, 7):
            return super().step_values(cb_params, step, steps_done)
        loss, overflow, loss_scale, *rest = outputs
        values: dict[str, Any] = {"loss": float(np.mean(to_numpy(loss))), "overflow": overflow, "loss_scale": loss_scale}
        if rest and rest[0] is not None:
            values["lr"] = rest[0]
        global_norm = rest[1] if len(rest) >= 2 else None
        if global_norm is not None:
            values["grad_norm"] = global_norm
        if len(rest) == 4 and rest[2] is not None:
            squared = to_numpy(rest[2]).astype(np.float64).reshape(-1)
            norms = np.sqrt(squared)
            names = self.health.param_names(len(norms))
            values["param_grad_norms"] = dict(zip(names, norms, strict=True))
            if global_norm is None:
                values["grad_norm"] = float(np.sqrt(squared.sum()))
        if "grad_norm" not in values:
            self.health.note(step, NO_NORM_NOTE)
        return values


for _name in REGISTERED_NAMES:
    MindFormerRegister.register_cls(MindFormersHealthMonitor, MindFormerModuleType.CALLBACK, alias=_name)
