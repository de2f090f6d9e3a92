"""MindFormers: a YAML `callbacks:` entry turns the health monitor on.

Add to your MindFormers YAML:

    callbacks:
      - type: MFLossMonitor
      - type: HealthMonitor            # registered by `import trainer_hooks.mindformers_callback`
        log_dir: ./output/health
        collect_freq: 10
        seq_length: 4096               # optional: logs train/tokens_per_s too
    runner_wrapper:
      type: MFTrainOneStepCell
      use_clip_grad: True              # MFTrainOneStepCell then returns the global norm
      local_norm: True                 # ... and each gradient's norm

and import the module once before MindFormers builds the callbacks, for example in your launch
script:

    import trainer_hooks.mindformers_callback  # noqa: F401  (registers HealthMonitor)
    from mindformers import Trainer, MindFormerConfig
    Trainer(MindFormerConfig("my_run.yaml")).train()

This file shows the same path MindFormers takes (`build_callback` over the YAML entries) without
a full LLM, which does not run on the CPU:

    python -m trainer_hooks.examples.mindformers_run my_run.yaml
"""

from __future__ import annotations

import sys

import trainer_hooks.mindformers_callback  # noqa: F401  (registers HealthMonitor)


def build_callbacks(yaml_path: str):
    from mindformers.core.callback.build_callback import build_callback
    from mindformers.tools.register import MindFormerConfig

    return build_callback(MindFormerConfig(yaml_path).callbacks)


if __name__ == "__main__":
    print(build_callbacks(sys.argv[1]))
