"""`check_error` (info only): a check raised on this run; the others still ran (see the engine)."""

from tb_health_plugin.analysis.kinds import Kind, register

KIND = register(Kind(name="check_error", messages=("check_error.failed",)))
