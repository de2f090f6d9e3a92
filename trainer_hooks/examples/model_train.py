"""`Model.train` with `HealthMonitor`, plus the one-line training-cell wrapper for gradient norms.

    python -m trainer_hooks.examples.model_train --log-dir runs/model_train
    tb-health check runs/model_train        # or: tensorboard --logdir runs/model_train
"""

from __future__ import annotations

import argparse

import mindspore as ms
import numpy as np
from mindspore import dataset as ds
from mindspore import nn

from trainer_hooks import HealthMonitor, TrainOneStepWithHealth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", default="runs/model_train")
    parser.add_argument("--plain", action="store_true", help="no wrapper: Model(net, loss_fn, optimizer)")
    parser.add_argument("--loss-scale", action="store_true", help="dynamic loss scaling (logs scale and overflow)")
    args = parser.parse_args()

    ms.set_context(mode=ms.GRAPH_MODE)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 16)).astype(np.float32)
    y = (x @ rng.normal(size=(16, 1))).astype(np.float32)
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=True).batch(16)
    net = nn.SequentialCell(nn.Dense(16, 32), nn.ReLU(), nn.Dense(32, 1))
    loss_fn = nn.MSELoss()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=nn.CosineDecayLR(1e-4, 1e-2, 320))

    if args.plain:
        model = ms.Model(net, loss_fn, optimizer)  # HealthMonitor logs what it can see
    else:
        scale = nn.DynamicLossScaleUpdateCell(2.0**12, 2, 100) if args.loss_scale else None
        # the one-line change: gradient norms, the rate used, loss scale and overflow per step
        model = ms.Model(TrainOneStepWithHealth(nn.WithLossCell(net, loss_fn), optimizer, scale_sense=scale))
    model.train(10, data, callbacks=[HealthMonitor(args.log_dir)], dataset_sink_mode=False)


if __name__ == "__main__":
    main()
