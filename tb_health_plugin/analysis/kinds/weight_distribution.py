"""`weight_distribution`: weight norms drifting from their scale, or values saturating."""

from tb_health_plugin.analysis.checks.weights import weights_check
from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(
    Kind(
        name="weight_distribution",
        messages=("weights.drift", "weights.saturation", "weights.names", "weights.names.more"),
        advice=("weights.advice.drift", "weights.advice.saturation"),
        run_checks=(weights_check,),
    )
)
