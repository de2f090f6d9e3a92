"""`loss_spike`: a short jump of the loss above its own noise (a long one is a recovered jump)."""

from tb_health_plugin.analysis import diagnosis
from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(
    Kind(
        name="loss_spike",
        messages=(
            "loss_spike.jump",
            "loss_spike.points.one",
            "loss_spike.points.many",
            "loss_spike.tail.warmup",
            "loss_spike.tail.early",
            "loss_spike.tail.restart",
            "loss_spike.tail.first_batches",
            "loss_spike.tail.converged",
            "loss_spike.long",
            "loss_spike.long.restart",
            "series.loss",
            "series.loss_window_max",
        ),
        causes=("lr_change", "mixed_precision_overflow", "bad_batch", "unstable_update", "data"),
        run_checks=(check_loss_curve,),
        diagnose=diagnosis.loss_spike_cause,
    )
)
