"""`overfitting`: the eval loss rises while the training loss keeps falling."""

from tb_health_plugin.analysis.checks.loss import check_overfitting
from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(Kind(name="overfitting", messages=("overfitting.eval_rises",), run_checks=(check_overfitting,)))
