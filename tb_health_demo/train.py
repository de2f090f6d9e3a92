"""Train one demo run with the project's hooks: `python -m tb_health_demo.train NAME LOGDIR`.

Each run trains in its own process (MindSpore keeps global state, and a diverging run must not
disturb the others). The training is the usage the README recommends: `Model.train` with
`HealthMonitor`, the training cell wrapped in `TrainOneStepWithHealth` for gradient norms.
Progress goes to stdout as `progress <step> <total>` lines for the runner.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

from tb_health_demo.scenarios import Scenario, by_name

PROGRESS_EVERY = 50


def learning_rates(scenario: Scenario) -> list[float]:
    """Linear warm-up, then cosine decay to 10% of the peak (or constant)."""
    rates = []
    for step in range(scenario.steps):
        if step < scenario.warmup_steps:
            rate = scenario.peak_lr * (step + 1) / scenario.warmup_steps
        elif scenario.schedule == "constant":
            rate = scenario.peak_lr
        else:
            progress = (step - scenario.warmup_steps) / max(1, scenario.steps - scenario.warmup_steps)
            rate = scenario.peak_lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        rates.append(rate)
    return rates


def batches(scenario: Scenario, rank: int):
    """The run's batches as a generator source (rank-specific seed, optional corruption)."""
    from tb_health_demo import models

    data = models.MarkovTokens(seed=rank) if scenario.model == "transformer" else models.GaussianClasses(seed=rank)
    for step in range(scenario.steps):
        if step in scenario.corrupt_steps:
            yield data.corrupted_batch()
        else:
            yield data.next_batch()


def build(scenario: Scenario):
    import mindspore as ms
    from mindspore import nn

    from tb_health_demo import models
    from trainer_hooks import TrainOneStepWithHealth

    ms.set_seed(0)
    if scenario.model == "transformer":
        net, loss_fn = models.TinyTransformerLM(), models.TokenCrossEntropy()
    else:
        net, loss_fn = models.DeepSigmoidMLP(), nn.CrossEntropyLoss()
    rates = learning_rates(scenario)
    if scenario.optimizer == "sgd":
        optimizer = nn.SGD(net.trainable_params(), learning_rate=rates)
    else:
        optimizer = nn.AdamWeightDecay(net.trainable_params(), learning_rate=rates, weight_decay=0.01)
    return ms.train.Model(TrainOneStepWithHealth(nn.WithLossCell(net, loss_fn), optimizer))


def train(scenario: Scenario, logdir: str, rank: int) -> None:
    import mindspore as ms
    import mindspore.dataset as ds
    from mindspore.train.callback import Callback

    from trainer_hooks import HealthMonitor

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    model = build(scenario)
    columns = ["tokens", "labels"] if scenario.model == "transformer" else ["features", "labels"]
    dataset = ds.GeneratorDataset(lambda: batches(scenario, rank), column_names=columns, shuffle=False)

    class HostWork(Callback):
        """The straggler's slow host: `slow_ms` of host work before every step, on the critical
        path. (A sleep in the data generator would not do: the dataset pipeline prefetches, so
        it is hidden whenever a step computes for longer, as on a loaded machine.)"""

        def on_train_step_begin(self, run_context):
            time.sleep(scenario.slow_ms / 1000.0)

    class Progress(Callback):
        def on_train_step_end(self, run_context):
            step = run_context.original_args().cur_step_num
            if step % PROGRESS_EVERY == 0 or step == scenario.steps:
                print(f"progress {step} {scenario.steps}", flush=True)

    batch = 16 if scenario.model == "transformer" else 32
    monitor = HealthMonitor(
        os.path.join(logdir, scenario.name),
        collect_freq=5,
        batch_size=batch,
        seq_length=16 if scenario.model == "transformer" else None,
        rank=rank,
        world_size=scenario.world_size,
        histogram_freq=50,
    )
    # HostWork runs first: its time falls between one step's end and the next one's begin, where
    # the monitor measures host time
    straggling = [HostWork()] if scenario.slow_rank == rank and scenario.slow_ms else []
    model.train(1, dataset, callbacks=[*straggling, monitor, Progress()], dataset_sink_mode=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario")
    parser.add_argument("logdir")
    parser.add_argument("--rank", type=int, default=0)
    args = parser.parse_args(argv)
    np.seterr(all="ignore")
    train(by_name(args.scenario), os.path.abspath(args.logdir), args.rank)
    return 0


if __name__ == "__main__":
    sys.exit(main())
