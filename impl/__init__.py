# SPDX-License-Identifier: Apache-2.0
# Implements THD packing spec 2.0.0
"""Fast torch implementation of the THD packing spec.

Vendorable: relative imports only, depends on torch and the standard library. The Megatron
adapter lives in `.megatron` and is not imported here (it needs megatron-core).
"""

from .bins import BinConfig, Bins, bin_lengths, partition
from .config import PackConfig
from .engine import resolve_engine_config
from .labels import loss_mask
from .pack import pack_thd
from .plan import Plan, plan_thd
from .unpack import unpack_thd

SPEC_VERSION = "2.0.0"

__all__ = [
    "SPEC_VERSION",
    "BinConfig",
    "Bins",
    "PackConfig",
    "Plan",
    "bin_lengths",
    "loss_mask",
    "pack_thd",
    "partition",
    "plan_thd",
    "resolve_engine_config",
    "unpack_thd",
]
