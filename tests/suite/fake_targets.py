"""Small conformance targets that exercise the suite's own machinery (tests/suite/).

Each wraps the literal reference, so every check it is given passes unless the wrapper
changes something on purpose.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from conformance.targets.reference import ReferenceTarget

CORE = frozenset({"need_roll", "pad_value", "contiguous", "zero_length", "trailing_dims",
                  "unpack"})


class DecliningTarget(ReferenceTarget):
    """The reference with bucket, fp8 and min_local_rows declined: the adapter raises
    NotImplementedError for them, as a real adapter for a packer without them would."""

    name = "declining"
    description = "tests/suite: the reference, declining bucket, fp8 and min_local_rows"
    capabilities = CORE

    def pack(self, seqs: Any, config: dict[str, Any], cp_rank: Any, *, need_roll: Any = False,
             pad_value: Any = 0) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        for feature in ("bucket", "fp8", "min_local_rows"):
            if config.get(feature) not in (None, False):
                raise NotImplementedError(f"{feature} is not supported")
        return super().pack(seqs, config, cp_rank, need_roll=need_roll, pad_value=pad_value)
