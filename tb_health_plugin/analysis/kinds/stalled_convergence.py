"""`stalled_convergence`: the loss stopped improving while the learning rate is still high."""

from tb_health_plugin.analysis import diagnosis
from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(
    Kind(
        name="stalled_convergence",
        messages=("stalled.from_start", "stalled.from_start.rising", "stalled.from_start.after_blow_up",
                  "stalled.since_step", "stalled.lr_share", "series.loss"),
        causes=("lr_at_floor", "vanishing_gradients"),
        run_checks=(check_loss_curve,),
        diagnose=diagnosis.stall_cause,
    )
)
