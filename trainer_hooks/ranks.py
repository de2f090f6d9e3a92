"""Which rank this process is, so that each rank logs its own run `rank_<id>/`.

MindSpore's communication API is the authority once `mindspore.communication.init()` ran;
before that (or without MindSpore) the launchers' environment tells: `msrun` exports
`RANK_ID`/`RANK_SIZE` (and `MS_NODE_ID`/`MS_WORKER_NUM` for its dynamic cluster), OpenMPI
`OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE`, torchrun-style launchers `RANK`/`WORLD_SIZE`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from tb_health_plugin.contract import rank_folder

# (rank variable, world-size variable), in order of trust.
LAUNCHER_VARIABLES = (
    ("RANK_ID", "RANK_SIZE"),
    ("MS_NODE_ID", "MS_WORKER_NUM"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("RANK", "WORLD_SIZE"),
)


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    source: str  # where the numbers came from, for messages

    @property
    def run_folder(self) -> str:
        return rank_folder(self.rank)


def detect_rank(environ: Mapping[str, str] | None = None) -> RankInfo:
    """This process's rank and the world size; rank 0 of 1 when nothing says otherwise."""
    from_api = _from_mindspore_communication()
    if from_api is not None:
        return from_api
    return rank_from_environment(os.environ if environ is None else environ)


def rank_from_environment(environ: Mapping[str, str]) -> RankInfo:
    for rank_var, size_var in LAUNCHER_VARIABLES:
        rank = _as_int(environ.get(rank_var))
        if rank is None:
            continue
        size = _as_int(environ.get(size_var))
        if size is None:
            size = _as_int(environ.get("RANK_SIZE")) or rank + 1
        return RankInfo(rank, max(size, rank + 1), rank_var)
    return RankInfo(0, 1, "default")


def _from_mindspore_communication() -> RankInfo | None:
    """Only when MindSpore is already imported and its communication initialised: never import it."""
    if "mindspore" not in sys.modules:
        return None
    try:
        from mindspore.communication import get_group_size, get_rank
        from mindspore.communication._comm_helper import _is_initialized

        if not _is_initialized():
            return None
        return RankInfo(int(get_rank()), int(get_group_size()), "mindspore.communication")
    except Exception:
        return None


def _as_int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None
