"""Literal NumPy reference of THD packing (spec/thd-packing.md and spec/bins.md, version 2.0.0).

Slow on purpose: plain loops that read like the spec. Every function names the rules it
implements. `impl/` exposes the same public names over torch tensors.
"""

from .bins import BinConfig, Bins, Piece, bin_lengths, partition
from .boundaries import segments_from_position_ids
from .config import PackConfig
from .engine import resolve_engine_config
from .labels import loss_mask
from .masked import pack_masked
from .pack import pack_thd, specified_slots
from .partition import partitioned_indices
from .plan import Plan, plan_thd
from .rowmap import RowSource, row_map
from .unpack import unpack_thd

SPEC_VERSION = "2.0.0"

__all__ = [
    "SPEC_VERSION",
    "BinConfig",
    "Bins",
    "PackConfig",
    "Piece",
    "Plan",
    "RowSource",
    "bin_lengths",
    "loss_mask",
    "pack_masked",
    "pack_thd",
    "partition",
    "partitioned_indices",
    "plan_thd",
    "resolve_engine_config",
    "row_map",
    "segments_from_position_ids",
    "specified_slots",
    "unpack_thd",
]
