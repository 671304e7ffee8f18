"""The mask form of a batch (R-IN-7): a padded array `x [B, S, *trail]` and a bool mask `[B, S]`.

Literal: the mask is checked, turned into the list of its sequences `x[i][mask[i]]`, and that
list is packed. Nothing here is faster than the list form; it only fixes what the form means.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .config import PackConfig
from .pack import pack_thd
from .plan import Plan


def masked_sequences(x: Any, mask: Any) -> list[np.ndarray]:
    """R-IN-7: sequence i is `x[i][mask[i]]`, its True entries in column order (R-IN-6: `x` and
    `mask` are only read). Every check runs before any entry is read."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"with mask=, the batch must be one padded numpy array [B, S, *trail], "
                        f"got {type(x).__name__}")  # R-ERR-1
    if x.ndim < 2:
        raise ValueError(f"with mask=, the batch must be [B, S, *trail], got shape {x.shape}")
    if not isinstance(mask, np.ndarray):
        raise TypeError(f"mask must be a bool numpy array [B, S], got {type(mask).__name__}")
    if mask.dtype != np.bool_:
        raise TypeError(f"mask must have dtype bool, got mask dtype {mask.dtype}")
    if mask.shape != x.shape[:2]:
        raise ValueError(f"mask has shape {mask.shape}, the batch needs {x.shape[:2]} (its "
                         "first two dimensions)")
    return [x[i][mask[i]] for i in range(x.shape[0])]


def pack_masked(
    x: Any,
    mask: Any,
    config: PackConfig,
    cp_rank: Any,
    *,
    need_roll: Any = False,
    pad_value: Any = 0,
) -> tuple[np.ndarray, np.ndarray, Plan]:
    """R-IN-7: the pack of the mask's sequences (B = 0 is R-ERR-7's empty batch there)."""
    if not isinstance(config, PackConfig):
        raise TypeError(f"config must be a PackConfig, got {type(config).__name__}")
    return pack_thd(masked_sequences(x, mask), config, cp_rank, need_roll=need_roll,
                    pad_value=pad_value)
