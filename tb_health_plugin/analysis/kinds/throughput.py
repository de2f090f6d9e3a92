"""`throughput`: a run slowing down, a rank lagging its job, or a rank's loss departing from it."""

from tb_health_plugin.analysis.checks.throughput import rank_check, step_time_check
from tb_health_plugin.analysis.kinds import Kind, register

MEASURES = ("host_time", "step_time", "time_per_sample", "wall_time")

KIND = register(
    Kind(
        name="throughput",
        messages=(
            "throughput.regression.time",
            "throughput.regression.samples",
            "throughput.lost_seconds",
            "throughput.slow_seconds",
            "throughput.not_material",
            "throughput.not_sustained",
            "throughput.slow_rank.host_time",
            "throughput.slow_rank",
            "throughput.rank_loss",
            *(f"throughput.measure.{measure}" for measure in MEASURES),
        ),
        advice=(
            "throughput.advice.slowdown",
            "throughput.advice.slow_rank",
            "throughput.advice.host_time",
            "throughput.advice.rank_loss",
        ),
        run_checks=(step_time_check,),
        job_checks=(rank_check,),
    )
)
