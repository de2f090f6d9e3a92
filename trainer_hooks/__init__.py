"""Training-side hooks for MindSpore and MindFormers that log health signals as tfevents.

Public API (MindSpore is imported only when a MindSpore-specific name is first used):

- `HealthMonitor(log_dir, collect_freq=10, ...)`: callback for `Model.train`.
- `TrainOneStepWithHealth(net_with_loss, optimizer, scale_sense=None)`: training cell that
  computes gradient norms, the learning rate used and loss-scale state inside the step.
- `HealthLogger(log_dir, ...)`: the core, for custom loops: `log_step(step, loss=..., grads=..., lr=...)`.
- `HealthOptions(log_dir, collect_freq=10, ...)`: the options all of these take, documented there.
- `grad_norm_stats(grads)`: `[global, per-parameter...]` norms, usable inside `ms.jit`.
- `lr_of_step(optimizer, step)`: the learning rate step `step` (from 1) used, from the schedule.
- `MindFormersHealthMonitor`: the MindFormers callback; `import trainer_hooks.mindformers_callback`
  registers it as `HealthMonitor` for YAML `callbacks:` entries.
"""

from __future__ import annotations

import importlib

from trainer_hooks.health_logger import HealthLogger
from trainer_hooks.options import HealthOptions

_LAZY = {
    "HealthMonitor": "trainer_hooks.monitor",
    "TrainOneStepWithHealth": "trainer_hooks.train_cell",
    "grad_norm_stats": "trainer_hooks.norms",
    "lr_of_step": "trainer_hooks.lr",
    "MindFormersHealthMonitor": "trainer_hooks.mindformers_callback",
}

__all__ = ["HealthLogger", "HealthOptions", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trainer_hooks' has no attribute {name!r}")
