"""Gradients through the Megatron adapter's unpack (R-MEG-3): the local rows stay in the
autograd graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import reference


def check_local_grad(grad: np.ndarray | None, plan: Any, cfg: Any, rank: int,
                     what: str) -> None:
    """R-MEG-3: the gradient of the outputs' sum on a rank's own rows is 1 on real rows and 0 on
    padding, so the local rows stayed in the autograd graph."""
    if grad is None:
        return
    real = np.array([src.real for src in reference.row_map(plan, cfg, rank)], dtype=bool)
    assert np.shape(grad)[0] == len(real), \
        f"{what}: rank {rank} holds {np.shape(grad)[0]} rows, spec {len(real)}"
    flat = np.asarray(grad).reshape(len(real), int(np.prod(np.shape(grad)[1:])))
    expected = np.broadcast_to(real[:, None], flat.shape).astype(flat.dtype)
    assert np.array_equal(flat, expected), (
        f"{what}: rank {rank}: gradient on the local rows is not 1 on real rows and 0 on "
        "padding (the local output left the autograd graph)")
