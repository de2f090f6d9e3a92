"""`exploding_gradients`: the global, early-layer or one layer's gradient norm grows far above its level."""

from tb_health_plugin.analysis import diagnosis
from tb_health_plugin.analysis.checks.gradients import gradient_check
from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(
    Kind(
        name="exploding_gradients",
        messages=(
            "gradients.global.exploding",
            "gradients.depth.exploding",
            "gradients.depth.exploding.closed",
            "gradients.layer.exploding.one",
            "gradients.layer.exploding.many",
        ),
        advice=(
            "gradients.advice.exploding",
            "gradients.advice.depth_exploding",
            "gradients.advice.layer_exploding",
        ),
        causes=("lr_change", "lr_peak"),
        run_checks=(gradient_check,),
        diagnose=diagnosis.exploding_cause,
    )
)
