"""`vanishing_gradients`: the global, early-layer or one layer's gradient norm collapses toward zero."""

from tb_health_plugin.analysis import diagnosis
from tb_health_plugin.analysis.checks.gradients import gradient_check
from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(
    Kind(
        name="vanishing_gradients",
        messages=(
            "gradients.global.vanishing",
            "gradients.depth.vanishing",
            "gradients.depth.vanishing.closed",
            "gradients.layer.vanishing.one",
            "gradients.layer.vanishing.many",
        ),
        advice=(
            "gradients.advice.vanishing",
            "gradients.advice.depth_vanishing",
            "gradients.advice.layer_vanishing",
            "gradients.advice.layer_zero",
        ),
        causes=("dead_gradients", "lr_at_floor"),
        run_checks=(gradient_check,),
        diagnose=diagnosis.vanishing_cause,
    )
)
