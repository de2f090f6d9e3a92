"""`lr_schedule`: the schedule's shape (info), and resets, jumps, an early zero or floor, NaN."""

from tb_health_plugin.analysis.checks.lr_schedule import lr_schedule_check
from tb_health_plugin.analysis.kinds import Kind, register

SHAPES = ("constant", "linear", "cosine", "step", "wsd", "exponential", "inverse_sqrt", "cyclic")
PROBLEMS = ("reset", "jump", "nonfinite", "zero", "early_floor")

KIND = register(
    Kind(
        name="lr_schedule",
        messages=(
            "lr_schedule.shape",
            "lr_schedule.shape.warmup",
            "lr_schedule.reset.after_resume",
            "lr_schedule.reset.outside_warmup",
            "lr_schedule.jump",
            "lr_schedule.nonfinite",
            "lr_schedule.zero",
            "lr_schedule.early_floor",
            *(f"lr_schedule.name.{shape}" for shape in SHAPES),
        ),
        advice=tuple(f"lr_schedule.advice.{problem}" for problem in PROBLEMS),
        run_checks=(lr_schedule_check,),
    )
)
