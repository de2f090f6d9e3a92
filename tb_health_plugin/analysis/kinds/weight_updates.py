"""`weight_updates`: updates far too large for the weights, or weights that stopped changing."""

from tb_health_plugin.analysis.checks.weights import weights_check
from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(
    Kind(
        name="weight_updates",
        messages=("weights.large_updates", "weights.stopped", "weights.names", "weights.names.more"),
        advice=("weights.advice.large_updates", "weights.advice.stopped"),
        run_checks=(weights_check,),
    )
)
