"""`divergence`: the loss rises for good, blows up, ends non-finite or above where it began, or
climbs back most of the way to it."""

from tb_health_plugin.analysis import diagnosis
from tb_health_plugin.analysis.checks.loss import check_loss_curve
from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(
    Kind(
        name="divergence",
        messages=(
            "divergence.nonfinite.restart",
            "divergence.nonfinite.at_once",
            "divergence.start.at_step",
            "divergence.start.window_min",
            "divergence.start.where",
            "divergence.start.early_low",
            "divergence.start.early_median",
            "divergence.start.median_of_first",
            "divergence.nonfinite.never_finite",
            "divergence.nonfinite.first_interval",
            "divergence.far_above",
            "divergence.far_above.learned_after",
            "divergence.far_above.restart",
            "divergence.far_above.from_init",
            "divergence.far_above.worse_than_init",
            "divergence.far_above.worse_than_reached",
            "divergence.ended_above",
            "divergence.ended_above.restart",
            "divergence.ended_above.lower_lr",
            "divergence.ended_above.worse_than_init",
            "divergence.ended_above.lost_learning",
            "divergence.not_recovered",
            "divergence.rise",
            "divergence.rise.open",
            "divergence.rise.open_slight",
            "divergence.rise.slight_then",
            "divergence.rise.recovered",
            "divergence.rise.restart",
            "divergence.rise.lower_lr",
            "divergence.climbed_back",
            "divergence.climbed_back.lost_share",
            "divergence.climbed_back.lost_all",
            "series.loss",
        ),
        causes=(
            "exploding_gradients",
            "backward_overflow",
            "lr_change",
            "mixed_precision_overflow",
            "unstable_update",
        ),
        run_checks=(check_loss_curve,),
        diagnose=diagnosis.divergence_cause,
    )
)
