"""`nonfinite`: NaN or Inf in the loss, the gradient norm, the eval loss or the learning rate."""

from tb_health_plugin.analysis import diagnosis
from tb_health_plugin.analysis.checks.loss import check_nonfinite
from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(
    Kind(
        name="nonfinite",
        messages=(
            "nonfinite.values",
            "nonfinite.tail.persists",
            "nonfinite.tail.points",
            "nonfinite.tail.points_and_end",
            "nonfinite.restart",
            "nonfinite.never_finite",
            "nonfinite.from_first_point",
            "nonfinite.counts",
            "nonfinite.end_of_divergence",
            "nonfinite.end_of_divergence.gradient_too",
            "nonfinite.end_of_divergence.after_earlier",
            "nonfinite.end_of_divergence.after_earlier.gradient_too",
            "series.training_loss",
            "series.gradient_norm",
            "series.evaluation_loss",
            "series.learning_rate",
        ),
        causes=("exploding_gradients", "backward_overflow", "forward_nonfinite", "finite_blow_up"),
        run_checks=(check_nonfinite,),
        diagnose=diagnosis.nonfinite_cause,
    )
)
