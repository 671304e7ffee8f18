"""The openrlhf target's mask form: OpenRLHF's own [B, S] input with its attention mask.

Expected values hand-computed from `unpad_and_slice_tensor`'s docstring: the rows where the mask
is set, in order; position ids `cumsum(mask) - 1`; under a ring group of 2 the row padded to a
multiple of 2 and cut into contiguous halves.
"""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

try:
    importlib.metadata.distribution("openrlhf")
    _INSTALLED = True
except importlib.metadata.PackageNotFoundError:
    _INSTALLED = False
pytestmark = pytest.mark.skipif(
    not _INSTALLED, reason="openrlhf is not installed (`nox -s conformance -- --target "
    "openrlhf` installs openrlhf==0.11.2 --no-deps)")


def test_left_and_scattered_padding() -> None:
    from thd_packing.peers.openrlhf import TARGET

    values = np.array([[0, 0, 3, 4, 5], [6, 0, 8, 9, 0]])
    mask = values != 0
    packs = [TARGET().pack_masked(values, mask, {"cp_size": 2, "cp_layout": "contiguous"}, r)
             for r in range(2)]
    assert [p.rows.tolist() for p in packs] == [[3, 4, 5], [6, 8, 9]]
    assert [np.asarray(p.position_ids).tolist() for p in packs] == [[0, 1, 2], [0, 1, 2]]
    assert packs[0].meta["cu_seqlens_padded"].tolist() == [0, 3, 6]
    assert mask.tolist() == (values != 0).tolist()  # the caller's mask untouched
