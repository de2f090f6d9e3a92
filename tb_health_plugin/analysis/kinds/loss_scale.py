"""`loss_scale`: overflow storms, a steady decline, a scale stuck at its floor or collapsed."""

from tb_health_plugin.analysis import diagnosis
from tb_health_plugin.analysis.checks.loss_scale import loss_scale_check
from tb_health_plugin.analysis.kinds import Kind, register

PROBLEMS = ("overflow_rate", "decline", "floor", "collapse")

KIND = register(
    Kind(
        name="loss_scale",
        messages=tuple(f"loss_scale.{problem}" for problem in PROBLEMS),
        advice=tuple(f"loss_scale.advice.{problem}" for problem in PROBLEMS),
        causes=("exploding_gradients",),
        run_checks=(loss_scale_check,),
        diagnose=diagnosis.loss_scale_cause,
    )
)
